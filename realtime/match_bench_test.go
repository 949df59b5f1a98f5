package realtime

import (
	"syscall"
	"testing"
	"time"

	"github.com/syncnode/syncnode/engine"
)

// BenchmarkMayMatch: what the hub now spends on an event none of 30
// sessions matches (same table, another project): the check that
// replaces reading the commit from SQL (BenchmarkCommitRead).
func BenchmarkMayMatch(b *testing.B) {
	sessions := make([]*session, 30)
	for i := range sessions {
		sessions[i] = &session{regs: []engine.Registration{{ID: "tasks", Table: "tasks", Effective: map[string][]string{"project_id": {"p1"}}}}}
	}
	body := []byte(`{"partition":"acme","logEpoch":"e1","commitSeq":42,"createdAtMs":1764630000000,"actorId":"alice","clientId":"pusher-alice","clientCommitId":"c42","schemaVersion":1,"table":"tasks","changeCount":1,"changes":[{"rowId":"x1","op":"upsert","rowVersion":7,"scopes":{"project_id":"p2"},"row":{"id":"x1","project_id":"p2","title":"v42"}}]}`)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		if mayMatch(sessions, "tasks", body) {
			b.Fatal("matched another project")
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/event")
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
