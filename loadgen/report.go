package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteSummary writes a run's human summary: throughput, latencies,
// server and tool CPU, the checks and the first errors.
func WriteSummary(w io.Writer, r *Result) {
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s · %s · %d VUs · %s · dataset %s · over %s · %s\n", r.Scenario, r.Profile, r.VUs,
		time.Duration(r.DurationSec*float64(time.Second)), thousands(float64(r.Dataset)), r.Transport, verdict)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  throughput\t%s %ss/s (%s %ss in %.1f s, %s sync rounds)\n", thousands(r.OpsPerSec), r.Unit,
		thousands(float64(r.Ops)), r.Unit, r.WallSec, thousands(float64(r.Rounds)))
	for _, s := range r.Latencies {
		if s.Count == 0 {
			fmt.Fprintf(tw, "  %s\tno samples\n", s.Name)
			continue
		}
		fmt.Fprintf(tw, "  %s\tn %s  p50 %s  p95 %s  p99 %s  max %s\n", s.Name, thousands(float64(s.Count)),
			fmtMs(s.P50), fmtMs(s.P95), fmtMs(s.P99), fmtMs(s.Max))
	}
	if m := r.Server; m != nil {
		fmt.Fprintf(tw, "  server\tCPU %s/%s · peak RSS %s · %s requests, %s errors · segments %d built / %d reused · %d prune runs · realtime %d opened, %d deltas, %d wakes\n",
			cpuPerOp(r.ServerCPUPerOpMs), r.Unit, mib(m.PeakRSSBytes), thousands(float64(m.Requests)), thousands(float64(m.RequestErrors)),
			m.SegmentsBuilt, m.SegmentsReused, m.PruneRuns, m.RealtimeOpened, m.RealtimeDeltas, m.RealtimeWakes)
	} else {
		fmt.Fprintf(tw, "  server\tno /__load/metrics: CPU and RSS unknown\n")
	}
	tool := fmt.Sprintf("CPU %s/%s", fmtMs(r.ToolCPUPerOpMs), r.Unit)
	if s := r.ServerCPUPerOpMs; s != nil && *s > 0 {
		tool += fmt.Sprintf(" (%.2f× the server's)", r.ToolCPUPerOpMs / *s)
	}
	fmt.Fprintf(tw, "  tool\t%s\n", tool)
	if s := r.ServerCPUPerOpMs; s != nil && r.ToolCPUPerOpMs >= *s {
		fmt.Fprintf(tw, "  \tWARNING: the virtual clients used as much CPU as the server; on a shared machine the tool may be what limits throughput\n")
	}
	if len(r.Extra) > 0 {
		keys := make([]string, 0, len(r.Extra))
		for k := range r.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			v := r.Extra[k]
			f := thousands(v)
			if v != float64(int64(v)) && v < 100 && v > -100 {
				f = strconv.FormatFloat(v, 'f', 2, 64)
			}
			parts = append(parts, k+"="+f)
		}
		fmt.Fprintf(tw, "  extra\t%s\n", strings.Join(parts, " "))
	}
	for i, c := range r.Checks {
		label := ""
		if i == 0 {
			label = "checks"
		}
		state := "PASS"
		switch {
		case c.Skipped:
			state = "SKIP"
		case !c.Pass:
			state = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%s  %s: %s (threshold %s)\n", label, state, c.Name, c.Measured, c.Threshold)
	}
	tw.Flush()
	if len(r.FirstErrors) > 0 {
		fmt.Fprintf(w, "  first errors (%d in all):\n", r.Errors)
		for _, e := range r.FirstErrors {
			fmt.Fprintf(w, "    - %s\n", e)
		}
	}
}

// Outcome is one scenario of a multi-scenario run: its runs, or the error
// that kept it from running.
type Outcome struct {
	Scenario string
	Profile  Profile
	Smoke    bool
	Runs     []*Result
	Err      error
}

// WriteTable writes the one-line-per-scenario table that closes `all`.
func WriteTable(w io.Writer, outcomes []Outcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nscenario\tprofile\tresult\tthroughput\tp50\tp95\tserver CPU/op\ttool CPU/op\tserver peak RSS")
	for _, o := range outcomes {
		row := summarize(o)
		if o.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\tERROR\t—\t—\t—\t—\t—\t—\t%s\n", o.Scenario, row.profile, o.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Scenario, row.profile, row.verdict, row.throughput,
			row.p50, row.p95, row.serverCPU, row.toolCPU, row.rss)
	}
	tw.Flush()
}

// Machine describes where a report was measured.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	OS        string `json:"os"`
	GoVersion string `json:"goVersion"`
	Storage   string `json:"storage"`
	Date      string `json:"date"`
}

// ThisMachine describes this machine; storage says what the server
// stored in.
func ThisMachine(storage string) Machine {
	return Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion: runtime.Version(), Storage: storage, Date: time.Now().UTC().Format("2006-01-02")}
}

// cpuModel is the CPU's model name from /proc/cpuinfo, "unknown CPU"
// elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// WriteMarkdown writes the README's load table: one row per scenario,
// medians over its runs.
func WriteMarkdown(w io.Writer, outcomes []Outcome, m Machine) {
	runs := 0
	for _, o := range outcomes {
		runs = max(runs, len(o.Runs))
	}
	fmt.Fprintf(w, "Measured by `syncnode load --report` on %s: %s, %d cores, %s, %s; server storage: %s.", m.Date, m.CPU, m.Cores, m.OS, m.GoVersion, m.Storage)
	if runs > 1 {
		fmt.Fprintf(w, " Each figure is the median of %d runs.", runs)
	}
	fmt.Fprint(w, " Latencies are the headline series of each scenario as its clients measure them; server CPU is the node's user + system time per op.\n\n")
	fmt.Fprintln(w, "| scenario | profile | throughput | p50 | p95 | server CPU / op | server peak RSS | thresholds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, o := range outcomes {
		row := summarize(o)
		if o.Err != nil {
			fmt.Fprintf(w, "| %s | %s | — | — | — | — | — | %s |\n", o.Scenario, row.profile, o.Err)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", o.Scenario, row.profile, row.throughput, row.p50, row.p95, row.serverCPU, row.rss, row.verdict)
	}
}

// Report markers: ReplaceReport rewrites what lies between them.
const (
	ReportBegin = "<!-- syncnode load report: begin -->"
	ReportEnd   = "<!-- syncnode load report: end -->"
)

// ReplaceReport returns doc with the text between the report markers
// replaced by report. A marker counts only on a line of its own, so prose
// that quotes it (the README's does) is left alone.
func ReplaceReport(doc, report []byte) ([]byte, error) {
	i := markerLine(doc, ReportBegin, 0)
	j := -1
	if i >= 0 {
		j = markerLine(doc, ReportEnd, i)
	}
	if i < 0 || j < i {
		return nil, errors.New("no " + ReportBegin + " … " + ReportEnd + " section")
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(ReportBegin)])
	out.WriteString("\n")
	out.Write(bytes.TrimSpace(report))
	out.WriteString("\n")
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// markerLine is the offset of the first line of doc at or after from that
// is exactly marker, or -1.
func markerLine(doc []byte, marker string, from int) int {
	for from <= len(doc) {
		k := bytes.Index(doc[from:], []byte(marker))
		if k < 0 {
			return -1
		}
		k += from
		end := k + len(marker)
		if (k == 0 || doc[k-1] == '\n') && (end == len(doc) || doc[end] == '\n' || doc[end] == '\r') {
			return k
		}
		from = end
	}
	return -1
}

// row is one scenario's figures as the tables print them.
type row struct {
	profile, verdict, throughput, p50, p95, serverCPU, toolCPU, rss string
}

// summarize takes the medians of an outcome's runs.
func summarize(o Outcome) row {
	r := row{profile: profileText(o.Profile)}
	if len(o.Runs) > 0 && TakesTransport(o.Scenario) && o.Runs[0].Transport != TransportHTTP {
		r.profile += ", over " + string(o.Runs[0].Transport)
	}
	if o.Smoke {
		r.profile += " (smoke)"
	}
	if len(o.Runs) == 0 {
		return r
	}
	first := o.Runs[0]
	passed := 0
	var ops, p50, p95, scpu, tcpu, rss []float64
	for _, x := range o.Runs {
		if x.Pass {
			passed++
		}
		ops = append(ops, x.OpsPerSec)
		if s, ok := x.series(headline(x)); ok && s.Count > 0 {
			p50, p95 = append(p50, s.P50), append(p95, s.P95)
		}
		if x.ServerCPUPerOpMs != nil {
			scpu = append(scpu, *x.ServerCPUPerOpMs)
		}
		tcpu = append(tcpu, x.ToolCPUPerOpMs)
		if x.Server != nil {
			rss = append(rss, float64(x.Server.PeakRSSBytes))
		}
	}
	r.verdict = "PASS"
	if passed < len(o.Runs) {
		r.verdict = "FAIL"
		if failed := o.Runs[slices.IndexFunc(o.Runs, func(x *Result) bool { return !x.Pass })].Failed(); len(failed) > 0 {
			r.verdict += ": " + failed[0]
		}
	}
	if len(o.Runs) > 1 {
		r.verdict += fmt.Sprintf(" (%d/%d)", passed, len(o.Runs))
	}
	r.throughput = fmt.Sprintf("%s %ss/s", thousands(median(ops)), first.Unit)
	prefix := ""
	if len(first.Latencies) > 1 {
		prefix = headline(first) + " "
	}
	r.p50, r.p95 = dash(p50, func(v float64) string { return prefix + fmtMs(v) }), dash(p95, func(v float64) string { return prefix + fmtMs(v) })
	r.serverCPU = dash(scpu, fmtMs)
	r.toolCPU = dash(tcpu, fmtMs)
	r.rss = dash(rss, func(v float64) string { return mib(int64(v)) })
	return r
}

// headline is a result's headline latency series.
func headline(r *Result) string {
	if len(r.Latencies) == 0 {
		return ""
	}
	return r.Latencies[0].Name
}

func profileText(p Profile) string {
	s := fmt.Sprintf("%d VUs, %s", p.VUs, p.Duration)
	if p.Dataset > 0 {
		s += ", " + thousands(float64(p.Dataset)) + " rows"
	}
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func dash(v []float64, f func(float64) string) string {
	if len(v) == 0 {
		return "—"
	}
	return f(median(v))
}

func cpuPerOp(v *float64) string {
	if v == nil {
		return "unknown"
	}
	return fmtMs(*v)
}

// fmtMs renders milliseconds with three significant digits.
func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/mb) }

// thousands renders v rounded to an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
