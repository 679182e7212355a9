package pool

import (
	"math"
	"sort"
	"time"
)

// demandHalfLife is how fast a template's past claims stop counting: its
// share of the prewarm pool follows the last few minutes' claims.
const demandHalfLife = 5 * time.Minute

// demandPrior is the claims every template is counted as having besides
// its own, so that the first few claims move a share by a slot or two,
// not the whole pool (a bench round with one early claim gave its
// template 9 of 12 sandboxes and cost the others cold starts).
const demandPrior = 2.0

// demand is each template's recent claims, from the fleet's cumulative
// claim counts by fingerprint (statedb.Store.PrewarmClaims): every replica
// that runs the refill keeps its own copy, from its own first look.
type demand struct {
	templates []Template
	fps       map[string]string
	last      map[string]int64   // cumulative counts at the last look
	weight    map[string]float64 // decayed claims since, by fingerprint
	at        time.Time
}

func newDemand(templates []Template, fps map[string]string) *demand {
	return &demand{templates: templates, fps: fps, last: map[string]int64{}, weight: map[string]float64{}}
}

// observe decays the weights to now and adds the claims since the last
// look; the first look only takes the counts as the baseline.
func (d *demand) observe(claims map[string]int64, now time.Time) {
	first := d.at.IsZero()
	if !first {
		decay := math.Exp2(-now.Sub(d.at).Seconds() / demandHalfLife.Seconds())
		for fp := range d.weight {
			d.weight[fp] *= decay
		}
	}
	for fp, n := range claims {
		if !first && n > d.last[fp] {
			d.weight[fp] += float64(n - d.last[fp])
		}
		d.last[fp] = n
	}
	d.at = now
}

// targets shares total among the templates, by fingerprint: each gets its
// Prewarm first (the total grows to their sum if it is smaller), the rest
// in proportion to the weights plus demandPrior (evenly while nothing was
// claimed), rounded by largest remainder (ties to the earlier configured
// template).
func (d *demand) targets(total int) map[string]int {
	out := make(map[string]int, len(d.templates))
	left := total
	var sum float64
	for _, t := range d.templates {
		out[d.fps[t.Name]] = t.Prewarm
		left -= t.Prewarm
		sum += d.weight[d.fps[t.Name]] + demandPrior
	}
	if left <= 0 {
		return out
	}
	type share struct {
		fp   string
		rest float64
	}
	shares := make([]share, len(d.templates))
	given := 0
	for i, t := range d.templates {
		fp := d.fps[t.Name]
		exact := float64(left) * (d.weight[fp] + demandPrior) / sum
		whole := int(exact)
		out[fp] += whole
		given += whole
		shares[i] = share{fp, exact - float64(whole)}
	}
	sort.SliceStable(shares, func(a, b int) bool { return shares[a].rest > shares[b].rest })
	for i := 0; given < left; i++ {
		out[shares[i].fp]++
		given++
	}
	return out
}
