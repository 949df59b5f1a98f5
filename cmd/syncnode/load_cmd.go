package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncnode/syncnode/loadgen"
)

const loadUsage = `Usage: syncnode load SCENARIO|all [flags]

Drives an SSP2 server with protocol-level virtual clients and checks the
thresholds: zero protocol errors, p95 latency ceilings, the server's peak
RSS. Exits non-zero when a threshold is crossed.

Without --url it starts its own "syncnode serve --load-fixture" for each
run (SQLite, or --postgres URL) and stops it afterwards.

Scenarios:
`

// runLoad is `syncnode load`.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, loadUsage)
		for _, n := range loadgen.Names() {
			fmt.Fprintf(stderr, "  %-18s %s\n", n, loadgen.About(n))
		}
		fmt.Fprintf(stderr, "  %-18s every scenario in turn\n\nFlags:\n", "all")
		fs.PrintDefaults()
	}
	url := fs.String("url", "", "base URL of the server under load (default: start a local load-fixture node)")
	postgres := fs.String("postgres", "", "PostgreSQL URL for the local node (default: SQLite)")
	token := fs.String("token", "", "bearer token sent with every request, for a server that wants one")
	var headers headerFlag
	fs.Var(&headers, "header", `extra request header "Name: value" (repeatable)`)
	smoke := fs.Bool("smoke", false, "the smoke profile: few clients, seconds (default: the full profile)")
	vus := fs.Int("vus", 0, "virtual users (default: the profile's)")
	duration := fs.Duration("duration", 0, "how long the users run, e.g. 30s (default: the profile's)")
	dataset := fs.Int("dataset", -1, "rows seeded into the storm project; -1 takes the profile's")
	var p95 p95Flag
	fs.Var(&p95, "max-p95", `override a p95 ceiling, "SERIES=DURATION" such as round=50ms (repeatable)`)
	maxRSS := fs.Int64("max-rss", 0, "override the server peak-RSS ceiling, in MiB")
	fetch := fs.Bool("fetch-segments", false, "download referenced segments and check them (default: count rows from the descriptor, as the reference suite does)")
	timeout := fs.Duration("timeout", time.Minute, "bound on one round")
	transport := fs.String("transport", string(loadgen.TransportHTTP), "what carries the rounds of push-pull and maintenance-churn: http (POST /sync) or socket (the realtime WebSocket, as reference clients sync)")
	runs := fs.Int("runs", 1, "runs per scenario; tables show medians")
	jsonPath := fs.String("json", "", "write the results as JSON to this file")
	report := fs.Bool("report", false, "print the README's markdown table on stdout (summaries then go to stderr)")
	readme := fs.String("readme", "", "rewrite the load report section of this markdown file with the table")
	quiet := fs.Bool("quiet", false, "no progress line")

	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			if isHelp(err) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(names) != 1 {
		fs.Usage()
		return errors.New("load: name one scenario, or all")
	}
	scenarios := names
	if names[0] == "all" {
		scenarios = loadgen.Names()
	} else if !slices.Contains(loadgen.Names(), names[0]) {
		return fmt.Errorf("load: unknown scenario %q (choose one of %s, or all)", names[0], strings.Join(loadgen.Names(), ", "))
	}
	if err := p95.check(scenarios); err != nil {
		return err
	}
	if *runs < 1 {
		return errors.New("load: --runs must be at least 1")
	}
	tr := loadgen.Transport(*transport)
	if !slices.Contains(loadgen.Transports(), tr) {
		return fmt.Errorf("load: --transport %q: choose http or socket", *transport)
	}
	if tr != loadgen.TransportHTTP && names[0] != "all" && !loadgen.TakesTransport(names[0]) {
		var takers []string
		for _, n := range loadgen.Names() {
			if loadgen.TakesTransport(n) {
				takers = append(takers, n)
			}
		}
		return fmt.Errorf("load: --transport applies to %s, not %s", strings.Join(takers, " and "), names[0])
	}
	if *url != "" && *postgres != "" {
		return errors.New("load: --postgres configures the local node; it cannot be combined with --url")
	}

	cfg := loadgen.Config{
		URL: *url, Header: headers.h, Smoke: *smoke, VUs: *vus, Duration: *duration,
		MaxP95: p95.m, MaxRSSBytes: *maxRSS << 20, FetchSegments: *fetch, RoundTimeout: *timeout, Transport: tr,
	}
	if *token != "" {
		if cfg.Header == nil {
			cfg.Header = http.Header{}
		}
		cfg.Header.Set("Authorization", "Bearer "+*token)
	}
	if *dataset >= 0 {
		cfg.Dataset = dataset
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	out := stdout
	if *report {
		out = stderr
	}
	storage := "external server " + *url
	if *url == "" {
		storage = "SQLite (synchronous=FULL), local node"
		if *postgres != "" {
			storage = "PostgreSQL, local node"
		}
	}

	var outcomes []loadgen.Outcome
	for _, name := range scenarios {
		o := loadgen.Outcome{Scenario: name, Profile: loadgen.ProfileOf(name, cfg), Smoke: cfg.Smoke}
		for range *runs {
			res, err := runLoadOnce(ctx, name, cfg, *postgres)
			if err != nil {
				o.Err = err
				fmt.Fprintf(out, "\n%v\n", err)
				break
			}
			loadgen.WriteSummary(out, res)
			o.Runs = append(o.Runs, res)
		}
		outcomes = append(outcomes, o)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(outcomes) > 1 || *runs > 1 {
		loadgen.WriteTable(out, outcomes)
	}

	machine := loadgen.ThisMachine(storage)
	if *jsonPath != "" {
		if err := writeLoadJSON(*jsonPath, machine, outcomes); err != nil {
			return err
		}
	}
	if *report || *readme != "" {
		var md strings.Builder
		loadgen.WriteMarkdown(&md, outcomes, machine)
		if *report {
			fmt.Fprint(stdout, md.String())
		}
		if *readme != "" {
			doc, err := os.ReadFile(*readme)
			if err != nil {
				return fmt.Errorf("load: %w", err)
			}
			if doc, err = loadgen.ReplaceReport(doc, []byte(md.String())); err != nil {
				return fmt.Errorf("load: %s: %w", *readme, err)
			}
			if err := os.WriteFile(*readme, doc, 0o644); err != nil {
				return fmt.Errorf("load: %w", err)
			}
		}
	}
	return loadVerdict(outcomes)
}

// runLoadOnce runs one scenario, against cfg.URL or a fresh local node.
func runLoadOnce(ctx context.Context, name string, cfg loadgen.Config, postgres string) (*loadgen.Result, error) {
	if cfg.URL != "" {
		return loadgen.Run(ctx, name, cfg)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("load: find the syncnode binary: %w", err)
	}
	n, err := loadgen.StartLocalNode(ctx, loadgen.LocalNodeConfig{Binary: self, Postgres: postgres})
	if err != nil {
		return nil, err
	}
	cfg.URL = n.URL
	res, err := loadgen.Run(ctx, name, cfg)
	if serr := n.Stop(); serr != nil && err == nil {
		err = serr
	}
	return res, err
}

// loadVerdict is nil when every scenario ran and held its thresholds;
// otherwise it names each crossed threshold and each scenario that could
// not run.
func loadVerdict(outcomes []loadgen.Outcome) error {
	var problems []string
	for _, o := range outcomes {
		if o.Err != nil {
			problems = append(problems, o.Err.Error())
			continue
		}
		for i, r := range o.Runs {
			for _, f := range r.Failed() {
				p := o.Scenario
				if len(o.Runs) > 1 {
					p += fmt.Sprintf(" (run %d)", i+1)
				}
				problems = append(problems, p+": "+f)
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("load: thresholds crossed or scenarios failed:\n  %s", strings.Join(problems, "\n  "))
}

func writeLoadJSON(path string, m loadgen.Machine, outcomes []loadgen.Outcome) error {
	type failure struct {
		Scenario string `json:"scenario"`
		Error    string `json:"error"`
	}
	doc := struct {
		Machine loadgen.Machine   `json:"machine"`
		Results []*loadgen.Result `json:"results"`
		Errors  []failure         `json:"errors,omitempty"`
	}{Machine: m, Results: []*loadgen.Result{}}
	for _, o := range outcomes {
		doc.Results = append(doc.Results, o.Runs...)
		if o.Err != nil {
			doc.Errors = append(doc.Errors, failure{o.Scenario, o.Err.Error()})
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// headerFlag collects "Name: value" headers.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }

func (f *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("header %q is not \"Name: value\"", s)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

// p95Flag collects SERIES=DURATION ceilings.
type p95Flag struct{ m map[string]time.Duration }

func (f *p95Flag) String() string { return "" }

func (f *p95Flag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if !ok || err != nil || d <= 0 {
		return fmt.Errorf("%q is not SERIES=DURATION (e.g. round=50ms)", s)
	}
	if f.m == nil {
		f.m = map[string]time.Duration{}
	}
	f.m[strings.TrimSpace(k)] = d
	return nil
}

// check refuses a series none of the scenarios has.
func (f *p95Flag) check(scenarios []string) error {
	for k := range f.m {
		found := false
		for _, s := range scenarios {
			found = found || slices.Contains(loadgen.SeriesOf(s), k)
		}
		if !found {
			return fmt.Errorf("load: --max-p95 %s: no such latency series in %s", k, strings.Join(scenarios, ", "))
		}
	}
	return nil
}
