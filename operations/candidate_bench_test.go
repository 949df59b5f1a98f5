package operations

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
)

// BenchmarkCandidateQuery is a command of one upsert, in a partition of
// its own (so every read covers one row: SQLite plans these relations as
// a range of the partition's primary key), whose whole-commit validator
// counts the project's open tasks with a registered query over the
// candidate state (query; the count includes the commit's row)
// against the same command with the validator reading nothing (none), on
// each store: the cost of one candidate query inside a push. cpu-µs/op is
// this process's CPU (all of SQLite's; PostgreSQL's server is not in it),
// steadier than ns/op on a shared machine.
func BenchmarkCandidateQuery(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			var (
				read atomic.Bool
				reg  *Registry
			)
			e := newEnv(b, stores[name], candidateFile(), func(c *engine.Config) {
				c.CommitValidator = func(ctx context.Context, v engine.CommitValidation) error {
					if !read.Load() {
						return nil
					}
					res, err := reg.QueryCandidate(ctx, v.Candidate, "openCount", v.Operations[0].Row["project_id"], false)
					if err == nil && res.Rows[0][0].Value != int64(1) {
						err = fmt.Errorf("the commit's row is not in the candidate state: %v", res.Rows)
					}
					return err
				}
			})
			reg = e.svc.Registry()
			n := int64(0)
			for _, mode := range []string{"none", "query"} {
				b.Run(mode, func(b *testing.B) {
					read.Store(mode == "query")
					cpu0 := cpuTime(b)
					for b.Loop() {
						n++
						id := caller(fmt.Sprintf("p%d", n), "u", engine.Allowed{"project_id": {"a"}})
						res, err := e.svc.Command(e.ctx, id, cmdReq("createMany", "r",
							Object{{"project", "a"}, {"first", n}, {"n", int64(1)}, {"prio", int64(1)}}))
						if err != nil || res.Status != "applied" {
							b.Fatal(res, err)
						}
					}
					b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
				})
			}
		})
	}
}

// cpuTime is the process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
