package telemetry

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// SandboxUsage is one sandbox's latest sample (pool.Sampler).
type SandboxUsage struct {
	SandboxID   string
	CPUCores    float64 // CPU in use, in cores, over the last interval
	MemoryBytes int64
	PIDs        int
	// The disk and egress figures (api.DiskEgress).
	DataBytes, LayerBytes, EgressSentBytes, EgressReceivedBytes int64
}

// WatchSandboxes exports the resource use of the sandboxes this replica
// samples, read with usage at scrape time: aggregates always
// (sandgate_sampled_sandboxes, sandgate_sampled_cpu_cores,
// sandgate_sampled_memory_bytes, sandgate_sampled_data_bytes,
// sandgate_sampled_layer_bytes, sandgate_sampled_egress_sent_bytes,
// sandgate_sampled_egress_received_bytes; sum() across replicas, each
// samples the sandboxes it serves), and with perSandbox one series set per sandbox
// labelled sandbox_id, gone once the sandbox is no longer sampled. Off by
// default: a label per sandbox makes the series count grow with the fleet.
// Without it, the topN sandboxes by CPU and the topN by memory get a series
// each (sandgate_top_sandbox_cpu_cores, sandgate_top_sandbox_memory_bytes,
// labelled rank and sandbox_id): at most 2*topN series, whatever the fleet.
func (m *Metrics) WatchSandboxes(usage func() []SandboxUsage, perSandbox bool, topN int) {
	c := &sandboxCollector{usage: usage, perSandbox: perSandbox, topN: topN,
		sampled: prometheus.NewDesc("sandgate_sampled_sandboxes", "Sandboxes this replica samples (pool.Sampler).", nil, nil),
		cpu:     prometheus.NewDesc("sandgate_sampled_cpu_cores", "CPU in use by the sandboxes this replica samples, in cores, over the last interval.", nil, nil),
		memory:  prometheus.NewDesc("sandgate_sampled_memory_bytes", "Memory charged to the sandboxes this replica samples.", nil, nil),
		sbCPU:   prometheus.NewDesc("sandgate_sandbox_cpu_cores", "A sandbox's CPU in use, in cores (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		sbMem:   prometheus.NewDesc("sandgate_sandbox_memory_bytes", "A sandbox's memory (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		sbPIDs:  prometheus.NewDesc("sandgate_sandbox_pids", "A sandbox's process count (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		data:    prometheus.NewDesc("sandgate_sampled_data_bytes", "Thread data on the gateway host of the sandboxes this replica samples.", nil, nil),
		layer:   prometheus.NewDesc("sandgate_sampled_layer_bytes", "Writable image layers of the sandboxes this replica samples.", nil, nil),
		sent:    prometheus.NewDesc("sandgate_sampled_egress_sent_bytes", "Bytes the sandboxes this replica samples sent through the egress proxy (a sum of their counters: it drops when a sandbox goes).", nil, nil),
		recv:    prometheus.NewDesc("sandgate_sampled_egress_received_bytes", "Bytes the sandboxes this replica samples received through the egress proxy (a sum of their counters: it drops when a sandbox goes).", nil, nil),
		sbData:  prometheus.NewDesc("sandgate_sandbox_data_bytes", "A sandbox's thread data (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		sbLayer: prometheus.NewDesc("sandgate_sandbox_layer_bytes", "A sandbox's writable image layer (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		sbSent:  prometheus.NewDesc("sandgate_sandbox_egress_sent_bytes_total", "Bytes a sandbox sent through the egress proxy (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		sbRecv:  prometheus.NewDesc("sandgate_sandbox_egress_received_bytes_total", "Bytes a sandbox received through the egress proxy (metrics_per_sandbox).", []string{"sandbox_id"}, nil),
		topCPU: prometheus.NewDesc("sandgate_top_sandbox_cpu_cores", "CPU in use, in cores, of the sandboxes this replica samples that use the most (rank 1 the most; metrics_top_n of them).",
			[]string{"rank", "sandbox_id"}, nil),
		topMem: prometheus.NewDesc("sandgate_top_sandbox_memory_bytes", "Memory of the sandboxes this replica samples that hold the most (rank 1 the most; metrics_top_n of them).",
			[]string{"rank", "sandbox_id"}, nil),
	}
	m.reg.MustRegister(c)
}

type sandboxCollector struct {
	usage                                                      func() []SandboxUsage
	perSandbox                                                 bool
	topN                                                       int
	sampled, cpu, memory, sbCPU, sbMem, sbPIDs, topCPU, topMem *prometheus.Desc
	data, layer, sent, recv, sbData, sbLayer, sbSent, sbRecv   *prometheus.Desc
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sampled, c.cpu, c.memory, c.sbCPU, c.sbMem, c.sbPIDs, c.topCPU, c.topMem,
		c.data, c.layer, c.sent, c.recv, c.sbData, c.sbLayer, c.sbSent, c.sbRecv} {
		ch <- d
	}
}

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	all := c.usage()
	var cpu float64
	var sum SandboxUsage
	for _, u := range all {
		cpu += u.CPUCores
		sum.MemoryBytes += u.MemoryBytes
		sum.DataBytes += u.DataBytes
		sum.LayerBytes += u.LayerBytes
		sum.EgressSentBytes += u.EgressSentBytes
		sum.EgressReceivedBytes += u.EgressReceivedBytes
		if c.perSandbox {
			ch <- prometheus.MustNewConstMetric(c.sbCPU, prometheus.GaugeValue, u.CPUCores, u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbMem, prometheus.GaugeValue, float64(u.MemoryBytes), u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbPIDs, prometheus.GaugeValue, float64(u.PIDs), u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbData, prometheus.GaugeValue, float64(u.DataBytes), u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbLayer, prometheus.GaugeValue, float64(u.LayerBytes), u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbSent, prometheus.CounterValue, float64(u.EgressSentBytes), u.SandboxID)
			ch <- prometheus.MustNewConstMetric(c.sbRecv, prometheus.CounterValue, float64(u.EgressReceivedBytes), u.SandboxID)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.sampled, prometheus.GaugeValue, float64(len(all)))
	ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.GaugeValue, cpu)
	for d, v := range map[*prometheus.Desc]int64{c.memory: sum.MemoryBytes, c.data: sum.DataBytes, c.layer: sum.LayerBytes,
		c.sent: sum.EgressSentBytes, c.recv: sum.EgressReceivedBytes} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	if c.perSandbox || c.topN <= 0 {
		return
	}
	// Ties go by sandbox id, so a scrape of equal figures names the same.
	top := slices.Clone(all)
	slices.SortFunc(top, func(a, b SandboxUsage) int {
		return cmp.Or(cmp.Compare(b.CPUCores, a.CPUCores), cmp.Compare(a.SandboxID, b.SandboxID))
	})
	for i, u := range top[:min(c.topN, len(top))] {
		ch <- prometheus.MustNewConstMetric(c.topCPU, prometheus.GaugeValue, u.CPUCores, strconv.Itoa(i+1), u.SandboxID)
	}
	slices.SortFunc(top, func(a, b SandboxUsage) int {
		return cmp.Or(cmp.Compare(b.MemoryBytes, a.MemoryBytes), cmp.Compare(a.SandboxID, b.SandboxID))
	})
	for i, u := range top[:min(c.topN, len(top))] {
		ch <- prometheus.MustNewConstMetric(c.topMem, prometheus.GaugeValue, float64(u.MemoryBytes), strconv.Itoa(i+1), u.SandboxID)
	}
}
