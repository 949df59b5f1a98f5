package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncnode/syncnode/internal/rusage"
)

// Profile is the size of a scenario run.
type Profile struct {
	VUs      int
	Duration time.Duration
	Dataset  int // rows seeded into the storm project
}

// Config configures one scenario run.
type Config struct {
	// URL is the server's base URL: its routes are URL/sync,
	// URL/segments/{id}, URL/realtime and, on a load fixture, URL/__load/….
	URL string
	// Header is sent with every request and WebSocket upgrade
	// (Authorization for a server that wants a token).
	Header http.Header
	// Smoke selects the smoke profile instead of the full one.
	Smoke bool
	// VUs, Duration and Dataset override the profile when set (Dataset
	// when non-nil: 0 is a valid dataset).
	VUs      int
	Duration time.Duration
	Dataset  *int
	// MaxP95 overrides latency ceilings by series name; series the
	// scenario does not have are ignored.
	MaxP95 map[string]time.Duration
	// MaxRSSBytes overrides the server peak-RSS ceiling.
	MaxRSSBytes int64
	// FetchSegments downloads every referenced segment (and checks its
	// length and content address) instead of counting its rows from the
	// descriptor, as the reference suite does.
	FetchSegments bool
	// RoundTimeout bounds one round (default 60 s).
	RoundTimeout time.Duration
	// Transport carries the users' sync rounds in the scenarios that take
	// a choice (push-pull, maintenance-churn): TransportHTTP (POST /sync,
	// the default) or TransportSocket (the realtime channel, §8.7). The
	// other scenarios keep their own mix.
	Transport Transport
	// Progress receives a progress line once a second; nil for none.
	Progress io.Writer
}

// Transport is what carries a scenario's sync rounds.
type Transport string

const (
	// TransportHTTP: one POST /sync per round.
	TransportHTTP Transport = "http"
	// TransportSocket: rounds over one realtime WebSocket per user, as
	// reference clients sync once connected (SPEC.md §8.7), with the
	// deltas applied and acked (§8.2).
	TransportSocket Transport = "socket"
	// TransportMixed is reported by scenarios whose users ride both.
	TransportMixed Transport = "http+socket"
)

// Transports lists the choices of Config.Transport.
func Transports() []Transport { return []Transport{TransportHTTP, TransportSocket} }

// TakesTransport reports whether scenario name honours Config.Transport.
func TakesTransport(name string) bool {
	s, ok := scenarioByName(name)
	return ok && s.transport == ""
}

// Result is the outcome of one scenario run; it is also the JSON result.
type Result struct {
	Scenario    string  `json:"scenario"`
	Profile     string  `json:"profile"` // "smoke" or "full"
	URL         string  `json:"url"`
	VUs         int     `json:"vus"`
	DurationSec float64 `json:"durationSec"`
	Dataset     int     `json:"dataset"`
	// Transport carried the users' sync rounds.
	Transport Transport `json:"transport"`
	// Fixture: the server has the load fixture's /__load routes.
	Fixture bool    `json:"fixture"`
	WallSec float64 `json:"wallSec"`
	// Unit is what Ops counts: "round", "bootstrap" or "reconnect".
	Unit      string   `json:"unit"`
	Ops       int64    `json:"ops"`
	OpsPerSec float64  `json:"opsPerSec"`
	Rounds    int64    `json:"rounds"` // every sync round, HTTP and socket
	Latencies []Series `json:"latencies"`
	// Extra holds scenario-specific figures (rows/s, prune runs, RSS trace
	// endpoints, …).
	Extra map[string]float64 `json:"extra,omitempty"`
	// Server is the server's /__load/metrics after the run, nil without
	// a fixture.
	Server *ServerMetrics `json:"server,omitempty"`
	// ServerCPUSec is the server's CPU time during the run, nil when it
	// does not report cpuSeconds; ToolCPUSec is this process's.
	ServerCPUSec     *float64 `json:"serverCpuSec,omitempty"`
	ServerCPUPerOpMs *float64 `json:"serverCpuPerOpMs,omitempty"`
	ToolCPUSec       float64  `json:"toolCpuSec"`
	ToolCPUPerOpMs   float64  `json:"toolCpuPerOpMs"`
	Errors           int64    `json:"errors"`
	FirstErrors      []string `json:"firstErrors,omitempty"`
	Checks           []Check  `json:"checks"`
	Pass             bool     `json:"pass"`
}

// Series summarizes one latency series, in milliseconds.
type Series struct {
	Name  string  `json:"name"`
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// Check is one threshold and how the run measured against it. A skipped
// check could not be measured on this server (no /__load routes) and does
// not fail the run.
type Check struct {
	Name      string `json:"name"`
	Threshold string `json:"threshold"`
	Measured  string `json:"measured"`
	Pass      bool   `json:"pass"`
	Skipped   bool   `json:"skipped,omitempty"`
}

// Failed lists the checks that failed, as "name: measured (threshold)".
func (r *Result) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.Pass && !c.Skipped {
			out = append(out, fmt.Sprintf("%s: %s (threshold %s)", c.Name, c.Measured, c.Threshold))
		}
	}
	return out
}

// series returns the named latency series, if the run has it.
func (r *Result) series(name string) (Series, bool) {
	for _, s := range r.Latencies {
		if s.Name == name {
			return s, true
		}
	}
	return Series{}, false
}

// maxFirstErrors bounds the error messages a result keeps.
const maxFirstErrors = 10

// defaultRoundTimeout bounds a round when Config.RoundTimeout is 0.
const defaultRoundTimeout = 60 * time.Second

// Run runs scenario name against the server at cfg.URL and evaluates its
// thresholds. An error means the run could not be carried out (a bad
// name, an unreachable server, no realtime channel); a run that was
// carried out returns its Result, whose Pass says whether every
// threshold held.
func Run(ctx context.Context, name string, cfg Config) (*Result, error) {
	sc, ok := scenarioByName(name)
	if !ok {
		return nil, fmt.Errorf("load: unknown scenario %q (choose one of %v)", name, Names())
	}
	prof := ProfileOf(name, cfg)
	if prof.Dataset < 0 {
		return nil, fmt.Errorf("load: dataset %d is negative", prof.Dataset)
	}
	if cfg.RoundTimeout <= 0 {
		cfg.RoundTimeout = defaultRoundTimeout
	}
	switch cfg.Transport {
	case "":
		cfg.Transport = TransportHTTP
	case TransportHTTP, TransportSocket:
	default:
		return nil, fmt.Errorf("load: unknown transport %q (choose one of %v)", cfg.Transport, Transports())
	}
	t, err := newHTTPTarget(cfg.URL, cfg.Header, cfg.RoundTimeout, prof.VUs+8, cfg.FetchSegments)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer t.close()
	r := &run{ctx: ctx, sc: sc, cfg: cfg, t: t, prof: prof, runID: newRunID(), stop: make(chan struct{}), series: map[string]*series{}}
	for _, s := range sc.series {
		r.series[s] = &series{}
	}
	if err := r.prepare(); err != nil {
		return nil, fmt.Errorf("load %s: %w", sc.name, err)
	}
	return r.execute()
}

// ProfileOf is the profile a run of scenario name with cfg uses: the
// smoke or full one with cfg's overrides.
func ProfileOf(name string, cfg Config) Profile {
	sc, ok := scenarioByName(name)
	if !ok {
		return Profile{}
	}
	prof := sc.full
	if cfg.Smoke {
		prof = sc.smoke
	}
	if cfg.VUs > 0 {
		prof.VUs = cfg.VUs
	}
	if cfg.Duration > 0 {
		prof.Duration = cfg.Duration
	}
	if cfg.Dataset != nil {
		prof.Dataset = *cfg.Dataset
	}
	return prof
}

// run is one scenario run in progress.
type run struct {
	ctx   context.Context
	sc    *scenario
	cfg   Config
	t     *httpTarget
	prof  Profile
	runID string
	epoch string

	fixture bool // the server has /__load/metrics
	seeded  bool // this run reset the server and seeded prof.Dataset rows

	stop     chan struct{} // closed when the duration is up
	ops      atomic.Int64
	rounds   atomic.Int64
	active   atomic.Int64
	series   map[string]*series
	counters sync.Map // name → *atomic.Int64, the scenario's own counts

	// thinkNs is the time users spent in their own pauses between ops
	// (think), as slept; userNs the time they ran, from the end of their
	// ramp delay to their return. Their ratio is how much of a paced
	// scenario's throughput the scenario itself decides.
	thinkNs, userNs atomic.Int64

	errMu     sync.Mutex
	errs      []string
	errCount  atomic.Int64
	rssTrace  []int64 // server RSS once a second (sampler goroutine only until it ends)
	lastServe atomic.Pointer[ServerMetrics]
}

// series is one latency series' samples.
type series struct {
	mu sync.Mutex
	d  []time.Duration
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// clientID names a virtual client uniquely per run, so reruns against a
// server that keeps its data never replay an earlier run's commit ids.
func (r *run) clientID(prefix string, n ...int) string {
	id := prefix + "-" + r.runID
	for _, x := range n {
		id += "-" + strconv.Itoa(x)
	}
	return id
}

// prepare finds out what the server offers, resets and seeds a load
// fixture, acquires the log epoch and checks the realtime channel.
func (r *run) prepare() error {
	_, err := r.t.metrics(r.ctx)
	switch {
	case err == nil:
		r.fixture = true
	case errors.Is(err, errNoRoute):
		r.note("the server has no /__load/metrics: no reset, no server RSS or CPU, checks that need them are skipped")
	default:
		return err
	}
	if r.fixture {
		err := r.t.reset(r.ctx, r.prof.Dataset)
		switch {
		case err == nil:
			r.seeded = true
		case errors.Is(err, errNoRoute):
			r.note("the server has no /__load/reset: its data is used as it is (seed %d rows into project %q yourself)", r.prof.Dataset, stormProject)
		default:
			return err
		}
	}
	if r.epoch, err = r.t.acquireEpoch(r.ctx, r.clientID("epoch")); err != nil {
		return err
	}
	if r.sc.realtime || r.transport() == TransportSocket {
		c, err := r.t.dialRealtime(r.ctx, r.clientID("probe"), false)
		if err != nil {
			return err
		}
		c.close()
	}
	return nil
}

// transport is what carries the users' rounds in this run.
func (r *run) transport() Transport {
	if r.sc.transport != "" {
		return r.sc.transport
	}
	return r.cfg.Transport
}

// note prints a remark on the progress writer.
func (r *run) note(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "%s: %s\n", r.sc.name, fmt.Sprintf(format, args...))
	}
}

// execute ramps the virtual users up, runs them and any background tasks
// for the duration, and builds the result.
func (r *run) execute() (*Result, error) {
	var before ServerMetrics
	if r.fixture {
		var err error
		if before, err = r.t.metrics(r.ctx); err != nil {
			return nil, fmt.Errorf("load %s: %w", r.sc.name, err)
		}
	}
	toolBefore := rusage.Self()
	start := time.Now()
	timer := time.AfterFunc(r.prof.Duration, func() { close(r.stop) })
	defer timer.Stop()

	var bg sync.WaitGroup
	for _, task := range r.sc.background {
		bg.Go(func() {
			if err := task(r); err != nil {
				r.fail(err)
			}
		})
	}
	ramp := min(r.sc.ramp, r.prof.Duration/2)
	var vus sync.WaitGroup
	for i := range r.prof.VUs {
		delay := ramp * time.Duration(i) / time.Duration(r.prof.VUs)
		vus.Go(func() {
			if delay > 0 && !r.pause(delay) {
				return
			}
			r.active.Add(1)
			defer r.active.Add(-1)
			began := time.Now()
			defer func() { r.userNs.Add(int64(time.Since(began))) }()
			if err := r.sc.vu(r, i); err != nil {
				r.fail(err)
			}
		})
	}
	sampled := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(sampled)
		r.sample(start, finished)
	}()
	vus.Wait()
	bg.Wait()
	close(finished)
	<-sampled
	wall := time.Since(start)
	toolAfter := rusage.Self()
	if err := r.ctx.Err(); err != nil {
		return nil, fmt.Errorf("load %s: %w", r.sc.name, err)
	}

	res := &Result{
		Scenario: r.sc.name, Profile: profileName(r.cfg.Smoke), URL: r.cfg.URL,
		VUs: r.prof.VUs, DurationSec: r.prof.Duration.Seconds(), Dataset: r.prof.Dataset, Transport: r.transport(), Fixture: r.fixture,
		WallSec: wall.Seconds(), Unit: r.sc.unit, Ops: r.ops.Load(), Rounds: r.rounds.Load(),
		Errors: r.errCount.Load(), FirstErrors: r.errs, Extra: map[string]float64{},
	}
	res.OpsPerSec = float64(res.Ops) / wall.Seconds()
	for _, name := range r.sc.series {
		res.Latencies = append(res.Latencies, r.series[name].summary(name))
	}
	res.ToolCPUSec = (toolAfter.CPU - toolBefore.CPU).Seconds()
	if res.Ops > 0 {
		res.ToolCPUPerOpMs = res.ToolCPUSec * 1000 / float64(res.Ops)
	}
	if r.fixture {
		after, err := r.t.metrics(r.ctx)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", r.sc.name, err)
		}
		res.Server = &after
		if before.HasCPU && after.HasCPU {
			cpu := after.CPUSeconds - before.CPUSeconds
			res.ServerCPUSec = &cpu
			if res.Ops > 0 {
				per := cpu * 1000 / float64(res.Ops)
				res.ServerCPUPerOpMs = &per
			}
		}
	}
	r.counters.Range(func(k, v any) bool {
		res.Extra[k.(string)] = float64(v.(*atomic.Int64).Load())
		return true
	})
	if r.sc.finish != nil {
		r.sc.finish(r, res)
	}
	res.Checks = r.checks(res)
	res.Pass = len(res.Failed()) == 0
	return res, nil
}

func profileName(smoke bool) string {
	if smoke {
		return "smoke"
	}
	return "full"
}

// sample reads the server's metrics and prints the progress line once a
// second until finished is closed.
func (r *run) sample(start time.Time, finished <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastOps int64
	last := start
	for {
		select {
		case <-finished:
			return
		case <-r.ctx.Done():
			return
		case now := <-tick.C:
			rss := ""
			if r.fixture {
				if m, err := r.t.metrics(r.ctx); err == nil {
					r.lastServe.Store(&m)
					r.rssTrace = append(r.rssTrace, m.RSSBytes)
					rss = fmt.Sprintf("  server RSS %s", mib(m.RSSBytes))
				}
			}
			ops := r.ops.Load()
			rate := float64(ops-lastOps) / now.Sub(last).Seconds()
			lastOps, last = ops, now
			if r.cfg.Progress != nil {
				fmt.Fprintf(r.cfg.Progress, "%s %s  %4.0fs/%.0fs  VUs %d/%d  %s %ss (%s/s)  errors %d%s\n",
					r.sc.name, profileName(r.cfg.Smoke), now.Sub(start).Seconds(), r.prof.Duration.Seconds(),
					r.active.Load(), r.prof.VUs, thousands(float64(ops)), r.sc.unit, thousands(rate), r.errCount.Load(), rss)
			}
		}
	}
}

// fail records a virtual user's or background task's error.
func (r *run) fail(err error) {
	r.errCount.Add(1)
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if len(r.errs) < maxFirstErrors {
		r.errs = append(r.errs, err.Error())
	}
}

// running reports whether the duration is not up yet.
func (r *run) running() bool {
	select {
	case <-r.stop:
		return false
	case <-r.ctx.Done():
		return false
	default:
		return true
	}
}

// pause waits d; false if the run stopped meanwhile.
func (r *run) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	case <-r.ctx.Done():
		return false
	}
}

// think is a user's pause between two ops: pause, counted in thinkNs.
func (r *run) think(d time.Duration) bool {
	began := time.Now()
	ok := r.pause(d)
	r.thinkNs.Add(int64(time.Since(began)))
	return ok
}

// thinkShare is the share of the users' running time spent in think.
func (r *run) thinkShare() float64 {
	if u := r.userNs.Load(); u > 0 {
		return float64(r.thinkNs.Load()) / float64(u)
	}
	return 0
}

// observe records a latency sample.
func (r *run) observe(name string, d time.Duration) {
	s := r.series[name]
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// count adds n to the scenario counter name (reported in Extra).
func (r *run) count(name string, n int64) {
	v, _ := r.counters.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

// round runs one sync round of c over rt and counts it; a socketClient
// applies its deltas before and acks after.
func (r *run) round(c *vclient, rt roundTripper, rowID, project string, lim pullLimits) (roundResult, error) {
	sc, _ := rt.(*socketClient)
	if sc != nil {
		if err := sc.beforeRound(r.ctx); err != nil {
			return roundResult{}, err
		}
	}
	res, err := c.round(r.ctx, rt, rowID, project, lim)
	if err == nil && sc != nil {
		err = sc.afterRound(r.ctx)
	}
	if err == nil {
		r.rounds.Add(1)
		if res.resets > 0 {
			r.count("resets", int64(res.resets))
		}
		if res.cached {
			r.count("cachedPushes", 1)
		}
	}
	return res, err
}

// bootResult is one bootstrap paged to completion.
type bootResult struct {
	rows  int64
	pages []time.Duration
	wall  time.Duration
}

// maxBootstrapPages bounds one bootstrap.
const maxBootstrapPages = 200

// bootstrap pulls until no section of c is still bootstrapping,
// downloading referenced segments when the run fetches them.
func (r *run) bootstrap(c *vclient, rt roundTripper, lim pullLimits) (bootResult, error) {
	var b bootResult
	start := time.Now()
	for {
		res, err := r.round(c, rt, "", "", lim)
		if err != nil {
			return b, err
		}
		if err := r.t.fetchSegments(r.ctx, res.refs, res.refSubs); err != nil {
			return b, fmt.Errorf("client %s: %w", c.id, err)
		}
		b.rows += res.rows
		b.pages = append(b.pages, res.latency)
		if res.complete {
			break
		}
		if len(b.pages) >= maxBootstrapPages {
			return b, fmt.Errorf("client %s: bootstrap did not complete in %d pages", c.id, maxBootstrapPages)
		}
	}
	b.wall = time.Since(start)
	return b, nil
}

// summary computes the series' percentiles the way the reference suite
// does: the sample at rank ceil(p·n).
func (s *series) summary(name string) Series {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	out := Series{Name: name, Count: len(d)}
	if len(d) == 0 {
		return out
	}
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(p float64) float64 {
		i := min(len(d)-1, max(0, int(math.Ceil(p*float64(len(d))))-1))
		return ms(d[i])
	}
	out.P50, out.P95, out.P99 = at(0.50), at(0.95), at(0.99)
	out.Max, out.Mean = ms(d[len(d)-1]), ms(sum/time.Duration(len(d)))
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// checks evaluates the thresholds: zero protocol errors, each series'
// p95 ceiling, the server's peak RSS, and the scenario's own checks.
func (r *run) checks(res *Result) []Check {
	p95 := map[string]time.Duration{}
	for k, c := range r.sc.p95 {
		p95[k] = time.Duration(c.of(r.cfg.Smoke)) * time.Millisecond
	}
	for k, v := range r.cfg.MaxP95 {
		if _, ok := r.series[k]; ok {
			p95[k] = v
		}
	}
	rssBytes := r.sc.rssMiB.of(r.cfg.Smoke) * mb
	if r.cfg.MaxRSSBytes > 0 {
		rssBytes = r.cfg.MaxRSSBytes
	}
	out := []Check{{Name: "protocol errors", Threshold: "= 0", Measured: strconv.FormatInt(res.Errors, 10), Pass: res.Errors == 0}}
	names := make([]string, 0, len(p95))
	for k := range p95 {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return slices.Index(r.sc.series, names[i]) < slices.Index(r.sc.series, names[j]) })
	for _, name := range names {
		ceil := p95[name]
		c := Check{Name: name + " p95", Threshold: "≤ " + fmtMs(ms(ceil))}
		s, _ := res.series(name)
		if s.Count == 0 {
			c.Measured = "no samples"
		} else {
			c.Measured, c.Pass = fmtMs(s.P95), s.P95 <= ms(ceil)
		}
		out = append(out, c)
	}
	rss := Check{Name: "server peak RSS", Threshold: "≤ " + mib(rssBytes)}
	if res.Server == nil {
		rss.Measured, rss.Skipped = "unknown (no /__load/metrics)", true
	} else {
		rss.Measured, rss.Pass = mib(res.Server.PeakRSSBytes), res.Server.PeakRSSBytes <= rssBytes
	}
	out = append(out, rss)
	if r.sc.checks != nil {
		out = append(out, r.sc.checks(r, res)...)
	}
	return out
}
