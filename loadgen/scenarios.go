package loadgen

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// scenario is one load scenario: its profiles and thresholds, mirroring
// the reference suite's, and what its virtual users and background tasks
// do.
type scenario struct {
	name, about string
	full, smoke Profile
	// ramp is how long the virtual users take to start, evenly spread.
	ramp time.Duration
	// unit is what one op is: the throughput and CPU-per-op unit.
	unit string
	// series are the latency series; the first is the headline one.
	series   []string
	realtime bool // needs the realtime channel
	// transport is what the scenario's rounds ride whatever the run's
	// Config.Transport; "" means the users' rounds ride the chosen one.
	transport Transport
	// p95 ceilings per series in ms and the server's peak RSS in MiB,
	// besides zero protocol errors.
	p95    map[string]ceiling
	rssMiB ceiling
	// vu runs virtual user n until the run stops.
	vu func(r *run, n int) error
	// background tasks run beside the users until the run stops.
	background []func(r *run) error
	// finish adds scenario figures to the result; checks adds checks.
	finish func(r *run, res *Result)
	checks func(r *run, res *Result) []Check
}

// ceiling is a threshold of the smoke and the full profile.
type ceiling struct{ smoke, full int64 }

func (c ceiling) of(smoke bool) int64 {
	if smoke {
		return c.smoke
	}
	return c.full
}

const mb = 1 << 20

// scenarios in the order `all` runs them.
var scenarios = []*scenario{pushPull, bootstrapStorm, reconnectStorm, maintenanceChurn, mixedSoak}

// Names lists the scenarios in the order `all` runs them.
func Names() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// About describes a scenario in one line.
func About(name string) string {
	if s, ok := scenarioByName(name); ok {
		return s.about
	}
	return ""
}

// SeriesOf lists a scenario's latency series.
func SeriesOf(name string) []string {
	if s, ok := scenarioByName(name); ok {
		return s.series
	}
	return nil
}

func scenarioByName(name string) (*scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return nil, false
}

// pushPull: every user owns a project, bootstraps it once, then loops
// rounds of one upsert (20 rows per user, round-robin) plus an
// incremental pull that must return its own commit.
var pushPull = &scenario{
	name:   "push-pull",
	about:  "N clients each loop push+pull rounds on their own project (over --transport)",
	full:   Profile{VUs: 50, Duration: 20 * time.Second},
	smoke:  Profile{VUs: 5, Duration: 4 * time.Second},
	ramp:   1500 * time.Millisecond,
	unit:   "round",
	series: []string{"round"},
	p95:    map[string]ceiling{"round": {1000, 500}},
	rssMiB: ceiling{400, 700},
	vu: func(r *run, n int) error {
		project := clientProject(n)
		return syncUser{id: "pp", sub: "tasks", project: project, series: "round", row: rows(project+"-r", 20)}.run(r, n)
	},
}

// bootstrapStorm: every user repeatedly bootstraps the seeded storm
// project as a fresh client, asking for the image lane, in pages of half
// the dataset (at least 1,000 rows); one snapshot must be built once and
// reused by everyone else.
var bootstrapStorm = &scenario{
	name:      "bootstrap-storm",
	about:     "M fresh clients bootstrap the same seeded dataset over and over; segment reuse must dominate",
	full:      Profile{VUs: 50, Duration: 60 * time.Second, Dataset: 100_000},
	smoke:     Profile{VUs: 5, Duration: 8 * time.Second, Dataset: 2_000},
	ramp:      500 * time.Millisecond,
	transport: TransportHTTP,
	unit:      "bootstrap",
	series:    []string{"bootstrap", "page"},
	p95:       map[string]ceiling{"bootstrap": {3000, 15000}},
	rssMiB:    ceiling{400, 900},
	vu: func(r *run, n int) error {
		lim := pullLimits{snapshotRows: int32(max(1000, r.prof.Dataset/2)), pages: 1, accept: acceptImage}
		for i := 0; r.running(); i++ {
			c := newVClient(r.clientID("boot", n, i), r.epoch)
			c.subscribe("storm", stormProject)
			b, err := r.bootstrap(c, r.t, lim)
			if err != nil {
				return err
			}
			if r.seeded && b.rows != int64(r.prof.Dataset) {
				return fmt.Errorf("client %s: bootstrap delivered %d rows of the %d seeded", c.id, b.rows, r.prof.Dataset)
			}
			r.observe("bootstrap", b.wall)
			for _, p := range b.pages {
				r.observe("page", p)
			}
			r.ops.Add(1)
			r.count("rows", b.rows)
		}
		return nil
	},
	finish: func(r *run, res *Result) {
		res.Extra["rowsPerSec"] = res.Extra["rows"] / res.WallSec
		if res.Server != nil {
			res.Extra["segmentsBuilt"] = float64(res.Server.SegmentsBuilt)
			res.Extra["segmentsReused"] = float64(res.Server.SegmentsReused)
		}
	},
	checks: func(r *run, res *Result) []Check {
		c := Check{Name: "segment reuse dominates", Threshold: "reused > built > 0"}
		if res.Server == nil {
			c.Measured, c.Skipped = "unknown (no /__load/metrics)", true
		} else {
			m := res.Server
			c.Measured = fmt.Sprintf("%d reused / %d built", m.SegmentsReused, m.SegmentsBuilt)
			c.Pass = m.SegmentsBuilt > 0 && m.SegmentsReused > m.SegmentsBuilt
		}
		return []Check{c}
	},
}

// reconnectStorm: realtime users connect, bootstrap the storm project over
// the socket, then drop and reconnect over and over, each time as a fresh
// client state running one catch-up round on the new socket, while an
// HTTP writer keeps changing the storm project.
var reconnectStorm = &scenario{
	name:       "reconnect-storm",
	about:      "N realtime clients repeatedly drop and reconnect while writes flow; catch-up over the socket",
	full:       Profile{VUs: 40, Duration: 20 * time.Second, Dataset: 2_000},
	smoke:      Profile{VUs: 5, Duration: 5 * time.Second, Dataset: 500},
	ramp:       time.Second,
	unit:       "reconnect",
	series:     []string{"reconnect", "catchup"},
	realtime:   true,
	transport:  TransportSocket,
	p95:        map[string]ceiling{"reconnect": {2000, 1500}, "catchup": {1500, 1000}},
	rssMiB:     ceiling{400, 700},
	background: []func(*run) error{stormWriter},
	vu: func(r *run, n int) error {
		id := r.clientID("rc", n)
		conn, err := r.t.dialRealtime(r.ctx, id, false)
		if err != nil {
			return err
		}
		defer func() { r.closeRealtime(conn) }()
		c := newVClient(id, r.epoch)
		c.subscribe("storm", stormProject)
		if _, err := r.bootstrap(c, r.socket(conn), socketPull); err != nil {
			return err
		}
		for r.running() {
			r.closeRealtime(conn)
			c = newVClient(id, r.epoch)
			c.subscribe("storm", stormProject)
			start := time.Now()
			if conn, err = r.t.dialRealtime(r.ctx, id, false); err != nil {
				return err
			}
			connect := time.Since(start)
			res, err := r.round(c, r.socket(conn), "", "", socketPull)
			if err != nil {
				return err
			}
			r.observe("catchup", res.latency)
			r.observe("reconnect", connect+res.latency)
			r.ops.Add(1)
			if !r.think(20 * time.Millisecond) {
				break
			}
		}
		return nil
	},
}

// stormWriter keeps 50 hot rows of the storm project changing, one
// push+pull round every 10 ms.
func stormWriter(r *run) error {
	c := newVClient(r.clientID("rc-writer"), r.epoch)
	c.subscribe("storm", stormProject)
	for seq := 0; r.running(); seq++ {
		if _, err := r.round(c, r.t, stormProject+"-hot-"+strconv.Itoa(seq%50), stormProject, pushPullLimits); err != nil {
			return fmt.Errorf("writer: %w", err)
		}
		r.count("writerRounds", 1)
		if !r.pause(10 * time.Millisecond) {
			break
		}
	}
	return nil
}

// socket is a realtime connection as a round tripper.
func (r *run) socket(c *rtConn) roundTripper { return timedRT{c: c, timeout: r.cfg.RoundTimeout} }

// closeRealtime closes a socket and adds what it received to the counts.
func (r *run) closeRealtime(c *rtConn) {
	if c == nil {
		return
	}
	c.close()
	r.count("deltas", c.deltas.Load())
	r.count("wakes", c.wakes.Load())
	if n := c.acks.Load(); n > 0 {
		r.count("acks", n)
	}
}

// maintenanceChurn: users share 8 projects; even users write (30 rows per
// project), odd users read, while the commit log is pruned every 200 ms.
var maintenanceChurn = &scenario{
	name:       "maintenance-churn",
	about:      "push/pull traffic racing repeated prune cycles; clients must keep syncing cleanly",
	full:       Profile{VUs: 30, Duration: 20 * time.Second, Dataset: 5_000},
	smoke:      Profile{VUs: 5, Duration: 5 * time.Second, Dataset: 500},
	ramp:       time.Second,
	unit:       "round",
	series:     []string{"round"},
	p95:        map[string]ceiling{"round": {1000, 600}},
	rssMiB:     ceiling{400, 700},
	background: []func(*run) error{pruner(200 * time.Millisecond)},
	vu: func(r *run, n int) error {
		u := syncUser{id: "mc", sub: "tasks", project: clientProject(n % 8), series: "round"}
		if n%2 == 0 {
			u.row = rows(u.project+"-w", 30)
		}
		return u.run(r, n)
	},
	finish: func(r *run, res *Result) {
		if res.Server != nil {
			res.Extra["pruneRemovedCommits"] = float64(res.Server.PruneRemovedCommits)
		}
	},
	checks: func(r *run, res *Result) []Check { return []Check{pruneCheck(res)} },
}

// pruner prunes the commit log through /__load/prune every interval. A
// server without the route is left alone (the prune check is then
// skipped).
func pruner(every time.Duration) func(*run) error {
	return func(r *run) error {
		if !r.fixture {
			return nil
		}
		for r.running() {
			err := r.t.prune(r.ctx)
			if err != nil {
				if r.ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, errNoRoute) {
					r.count("pruneUnavailable", 1)
					return nil
				}
				return fmt.Errorf("pruner: %w", err)
			}
			r.count("pruneRuns", 1)
			if !r.pause(every) {
				break
			}
		}
		return nil
	}
}

// pruneCheck: the prune race was exercised at least once.
func pruneCheck(res *Result) Check {
	c := Check{Name: "prune cycles fired", Threshold: "≥ 1"}
	if res.Extra["pruneUnavailable"] > 0 || !res.Fixture {
		c.Measured, c.Skipped = "unknown (no /__load/prune)", true
		return c
	}
	n := res.Extra["pruneRuns"]
	c.Measured, c.Pass = fmt.Sprintf("%.0f runs", n), n >= 1
	return c
}

// mixedSoak: readers (3 in 5 users) pull the storm project, writers (1 in
// 5) push+pull their own project, realtime users (1 in 5) run socket
// rounds on the storm project, with short pauses, while the log is pruned
// every 500 ms and the server's RSS is traced.
var mixedSoak = &scenario{
	name:       "mixed-soak",
	about:      "readers, writers, realtime clients and pruning interleaved for a long window; RSS watched for leaks",
	full:       Profile{VUs: 30, Duration: 120 * time.Second, Dataset: 20_000},
	smoke:      Profile{VUs: 5, Duration: 6 * time.Second, Dataset: 500},
	ramp:       2 * time.Second,
	unit:       "round",
	series:     []string{"read", "write", "realtime"},
	realtime:   true,
	transport:  TransportMixed,
	p95:        map[string]ceiling{"read": {1000, 600}, "write": {1000, 800}},
	rssMiB:     ceiling{400, 900},
	background: []func(*run) error{pruner(500 * time.Millisecond)},
	vu: func(r *run, n int) error {
		switch n % 5 {
		case 4:
			return soakRealtime(r, n)
		case 3:
			project := clientProject(n % 8)
			return syncUser{id: "soak", sub: "sub", project: project, series: "write", row: rows(project+"-s", 40), pause: 15 * time.Millisecond, over: TransportHTTP}.run(r, n)
		default:
			return syncUser{id: "soak", sub: "sub", project: stormProject, series: "read", pause: 15 * time.Millisecond, over: TransportHTTP}.run(r, n)
		}
	},
	finish: func(r *run, res *Result) {
		// Every user thinks after every op (15 ms over HTTP, 30 ms on
		// the socket, as the reference suite's users sleep), so the
		// throughput of a server answering in no time is ops/s divided
		// by the users' think share: at most 24/15 ms + 6/30 ms = 1,800
		// rounds/s at 30 users, whatever the server.
		if share := r.thinkShare(); share > 0 {
			res.Extra["thinkShare"] = share
			res.Extra["paceCeilingPerSec"] = res.OpsPerSec / share
		}
		if len(r.rssTrace) > 0 {
			first, last := float64(r.rssTrace[0])/mb, float64(r.rssTrace[len(r.rssTrace)-1])/mb
			res.Extra["rssStartMb"], res.Extra["rssEndMb"], res.Extra["rssGrowthMb"] = first, last, last-first
		}
	},
	checks: func(r *run, res *Result) []Check { return []Check{pruneCheck(res)} },
}

// syncUser is a virtual user subscribed to one project: it pulls once,
// then loops rounds — a push of row(seq) and a pull when row is set, a
// pull otherwise — recording each in series, pause apart. Its rounds ride
// over (the run's transport when empty); on the socket it is a
// socketClient.
type syncUser struct {
	id, sub, project, series string
	row                      func(seq int) string
	pause                    time.Duration
	over                     Transport
}

func (u syncUser) run(r *run, n int) error {
	id := r.clientID(u.id, n)
	c := newVClient(id, r.epoch)
	c.subscribe(u.sub, u.project)
	over := u.over
	if over == "" {
		over = r.transport()
	}
	var rt roundTripper = r.t
	var sc *socketClient
	if over == TransportSocket {
		conn, err := r.t.dialRealtime(r.ctx, id, true)
		if err != nil {
			return err
		}
		defer r.closeRealtime(conn)
		sc = &socketClient{c: c, conn: conn, timeout: r.cfg.RoundTimeout}
		rt = sc
	}
	if _, err := r.round(c, rt, "", "", pullOnly); err != nil {
		return err
	}
	for seq := 0; r.running(); seq++ {
		row, lim := "", pullOnly
		if u.row != nil {
			row, lim = u.row(seq), pushPullLimits
		}
		res, err := r.round(c, rt, row, u.project, lim)
		if err != nil {
			return err
		}
		r.observe(u.series, res.latency)
		r.ops.Add(1)
		if u.pause > 0 && !r.think(u.pause) {
			break
		}
	}
	return nil
}

// rows names a user's rows round-robin: prefix0 … prefix(n-1).
func rows(prefix string, n int) func(int) string {
	return func(seq int) string { return prefix + strconv.Itoa(seq%n) }
}

// soakRealtime is a mixed-soak realtime user: socket rounds on the storm
// project every 30 ms.
func soakRealtime(r *run, n int) error {
	id := r.clientID("soak-rt", n)
	conn, err := r.t.dialRealtime(r.ctx, id, false)
	if err != nil {
		return err
	}
	defer r.closeRealtime(conn)
	c := newVClient(id, r.epoch)
	c.subscribe("storm", stormProject)
	rt := r.socket(conn)
	if _, err := r.bootstrap(c, rt, socketPull); err != nil {
		return err
	}
	for r.running() {
		res, err := r.round(c, rt, "", "", socketPull)
		if err != nil {
			return err
		}
		r.observe("realtime", res.latency)
		r.ops.Add(1)
		if !r.think(30 * time.Millisecond) {
			break
		}
	}
	return nil
}
