package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/router"
)

// flag.Value implementations for the setting kinds. Durations accept Go
// syntax ("90s", "10m") or a bare number of seconds, as DeerFlow writes them.

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type boolValue bool

func (v *boolValue) String() string { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) IsBoolFlag() bool { return true }

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*v = durationValue(d)
	return nil
}

// offDuration is a duration where 0 means "off", stored as -1 because the
// component's zero value means "default".
type offDuration time.Duration

func (v *offDuration) String() string {
	if *v < 0 {
		return "0"
	}
	return time.Duration(*v).String()
}
func (v *offDuration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	switch {
	case d < 0:
		return fmt.Errorf("%q is negative", s)
	case d == 0:
		d = -1
	}
	*v = offDuration(d)
	return nil
}

// offInt is a count where 0 means "no limit", stored as -1.
type offInt int

func (v *offInt) String() string {
	if *v < 0 {
		return "0"
	}
	return strconv.Itoa(int(*v))
}
func (v *offInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a non-negative integer", s)
	}
	if n == 0 {
		n = -1
	}
	*v = offInt(n)
	return nil
}

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = intValue(n)
	return nil
}

// offBytes is a size in bytes written as docker run --memory takes it
// ("512m", "2g", "1.5GiB"); 0 means "no limit", stored as -1.
type offBytes int64

func (v *offBytes) String() string {
	if *v <= 0 {
		return "0"
	}
	n := int64(*v)
	for _, u := range []struct {
		size   int64
		suffix string
	}{{1 << 30, "g"}, {1 << 20, "m"}, {1 << 10, "k"}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
func (v *offBytes) Set(s string) error {
	n, err := units.RAMInBytes(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size (e.g. 512m, 2g)", s)
	}
	if n == 0 {
		n = -1
	}
	*v = offBytes(n)
	return nil
}

// offCPUs is a CPU count ("0.5", "2") stored in billionths of a CPU, as
// the engine takes it; 0 means "no limit", stored as -1.
type offCPUs int64

func (v *offCPUs) String() string {
	if *v < 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(*v)/1e9, 'f', -1, 64)
}
func (v *offCPUs) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || f > 1e6 {
		return fmt.Errorf("%q is not a CPU count (e.g. 0.5, 2)", s)
	}
	n := int64(f * 1e9)
	if n == 0 {
		n = -1
	}
	*v = offCPUs(n)
	return nil
}

// listValue is a comma-separated list; empty items are dropped.
type listValue []string

func (v *listValue) String() string { return strings.Join(*v, ",") }
func (v *listValue) Set(s string) error {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*v = out
	return nil
}

// capMode maps soft|hard onto pool.Config.HardCap.
type capMode bool

func (v *capMode) String() string {
	if *v {
		return "hard"
	}
	return "soft"
}
func (v *capMode) Set(s string) error {
	switch s {
	case "soft":
		*v = false
	case "hard":
		*v = true
	default:
		return fmt.Errorf("%q is not soft or hard", s)
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 90s, 10m, or seconds)", s)
	}
	return d, nil
}

// mapValue is key=value pairs, comma separated.
type mapValue map[string]string

func (v *mapValue) String() string {
	items := make([]string, 0, len(*v))
	for k, val := range *v {
		items = append(items, k+"="+val)
	}
	slices.Sort(items)
	return strings.Join(items, ",")
}
func (v *mapValue) Set(s string) error {
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not key=value", item)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	*v = out
	return nil
}

// tolerationsValue is the compact toleration list of kubernetes.ParseTolerations.
type tolerationsValue []kubernetes.Toleration

func (v *tolerationsValue) String() string { return kubernetes.FormatTolerations(*v) }
func (v *tolerationsValue) Set(s string) error {
	ts, err := kubernetes.ParseTolerations(s)
	if err != nil {
		return err
	}
	*v = ts
	return nil
}

// apiKeysValue is auth.ParseAPIKeys' compact list.
type apiKeysValue []auth.APIKey

func (v *apiKeysValue) String() string { return auth.FormatAPIKeys(*v) }
func (v *apiKeysValue) Set(s string) error {
	keys, err := auth.ParseAPIKeys(s)
	if err != nil {
		return err
	}
	*v = keys
	return nil
}

// rateValue is router.ParseRate's N/duration.
type rateValue router.Rate

func (v *rateValue) String() string { return router.Rate(*v).String() }
func (v *rateValue) Set(s string) error {
	r, err := router.ParseRate(s)
	*v = rateValue(r)
	return err
}

// setString is a string setting that remembers it was given (by a flag,
// a variable or the YAML file), even with its default value.
type setString struct {
	s   *string
	set *bool
}

func (v *setString) String() string {
	if v.s == nil { // flag's zero-value probe
		return ""
	}
	return *v.s
}
func (v *setString) Set(s string) error { *v.s, *v.set = s, true; return nil }

// setInt is a non-negative int setting that remembers it was given, so
// that unset (a default that depends on other settings) and 0 differ.
type setInt struct {
	n   *int
	set *bool
}

func (v *setInt) String() string {
	if v.n == nil { // flag's zero-value probe
		return "0"
	}
	return strconv.Itoa(*v.n)
}
func (v *setInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a non-negative integer", s)
	}
	*v.n, *v.set = n, true
	return nil
}

// egressModeValue is none | proxy | open.
type egressModeValue backend.EgressMode

func (v *egressModeValue) String() string { return string(*v) }
func (v *egressModeValue) Set(s string) error {
	m := backend.EgressMode(s)
	if err := (backend.Egress{Mode: m}).Validate(); err != nil {
		return err
	}
	*v = egressModeValue(m)
	return nil
}

// oneOf is a string setting that takes one of choices ("" among them
// where empty means a default): a typo is refused as the flag is parsed,
// a usage error (exit 2) like any other bad value, not a start-up failure.
type oneOf struct {
	s       *string
	choices []string
}

func (v *oneOf) String() string {
	if v == nil || v.s == nil { // flag's zero-value probe
		return ""
	}
	return *v.s
}
func (v *oneOf) Set(s string) error {
	if !contains(v.choices, s) {
		return fmt.Errorf("%q is not %s", s, orList(v.choices))
	}
	*v.s = s
	return nil
}

// orList is "a, b or c" of the non-empty choices.
func orList(choices []string) string {
	var named []string
	for _, c := range choices {
		if c != "" {
			named = append(named, c)
		}
	}
	if len(named) < 2 {
		return strings.Join(named, "")
	}
	return strings.Join(named[:len(named)-1], ", ") + " or " + named[len(named)-1]
}
