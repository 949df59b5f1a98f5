package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/backfill"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Version 1 has tasks(id, project, title); version 2 adds title_len, which
// the backfill tasks-title-len computes from title.
const backfillV1 = `{"version":1,"tables":[{"name":"tasks","primaryKey":"id","columns":[
 {"name":"id","type":"string"},{"name":"project","type":"string"},
 {"name":"title","type":"string","nullable":true}],"scopes":["project:{project}"]}]}`

var backfillV2 = strings.Replace(strings.Replace(backfillV1, `"version":1`, `"version":2`, 1),
	`{"name":"title","type":"string","nullable":true}]`,
	`{"name":"title","type":"string","nullable":true},{"name":"title_len","type":"integer","nullable":true}]`, 1)

// TestBackfillThroughNode: a version-1 node writes tasks; the version-2
// node on the same data declares the checkpoint and runs the backfill
// through Node.Backfiller. The checkpoint activates, and the batches are
// ordinary commits that reach the node's bus with the computed column.
func TestBackfillThroughNode(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	const part, name = "acme", "tasks-title-len"
	n1 := startNode(t, backfillV1, func(_ *testing.T, c *Config) { c.DataDir = dir })
	tasks, _ := n1.cfg.Schema.Table("tasks")
	for i := range 3 {
		payload, err := tasks.Codec.AppendRow(nil, []ssp2.Value{{Bytes: fmt.Appendf(nil, "t%d", i)}, {Bytes: []byte("p1")}, {Bytes: []byte(strings.Repeat("x", i+1))}})
		if err != nil {
			t.Fatal(err)
		}
		op := ssp2.Operation{Table: "tasks", RowID: fmt.Sprint("t", i), Op: ssp2.OpUpsert, Payload: payload}
		if _, err := n1.Engine.PushAuthoritative(ctx, engine.AuthoritativeCommit{Partition: part, ActorID: "seed", ClientID: "seed", ClientCommitID: fmt.Sprint(i),
			Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return []ssp2.Operation{op}, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	decl := storage.CheckpointKey{Partition: part, Name: name, SchemaVersion: 2}
	n2 := startNode(t, backfillV2, func(_ *testing.T, c *Config) {
		c.DataDir, c.Checkpoints = dir, []storage.CheckpointKey{decl}
	})
	runner, err := n2.Backfiller(backfill.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tasks2, _ := n2.cfg.Schema.Table("tasks")
	res, err := runner.Run(ctx, backfill.Job{Partition: part, Name: name, Sources: []string{"tasks"},
		Batch: func(ctx context.Context, tx storage.Tx, cursor string) ([]ssp2.Operation, string, bool, error) {
			rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: part, Table: "tasks",
				Scopes: map[string][]string{"project": {"p1"}}, AfterRowID: cursor, Limit: 100})
			if err != nil {
				return nil, "", false, err
			}
			ops := make([]ssp2.Operation, 0, len(rows))
			for _, r := range rows {
				vals, err := tasks2.Codec.DecodeRow(r.Payload, nil)
				if err != nil {
					return nil, "", false, err
				}
				vals[3] = ssp2.Value{Int: int64(len(vals[2].Bytes))}
				payload, err := tasks2.Codec.AppendRow(nil, vals)
				if err != nil {
					return nil, "", false, err
				}
				ops = append(ops, ssp2.Operation{Table: "tasks", RowID: r.RowID, Op: ssp2.OpUpsert, Payload: payload})
			}
			return ops, "", true, nil
		}})
	if err != nil || res.Outcome != storage.ActivateActivated || res.Rows != 3 {
		t.Fatalf("Run = %+v, %v; want activated with 3 rows", res, err)
	}
	cps, err := n2.Store.Checkpoints(ctx, part)
	if err != nil || len(cps) != 1 || cps[0].State != storage.CheckpointActivated {
		t.Fatalf("checkpoints = %+v, %v; want one activated", cps, err)
	}

	// The batch went to the bus like any commit.
	if err := n2.Relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := bus.NewPartition(part)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := prod.CommitSubject(p, "tasks")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := n2.NATS.JetStream().Stream(ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	body, err := bus.DecodeBody(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if body.ClientID != "syncnode-backfill:"+name || body.ActorID != backfill.DefaultActor || len(body.Changes) != 3 {
		t.Fatalf("last event = %+v; want the backfill's batch of 3", body)
	}
	for i, ch := range body.Changes {
		var row struct {
			TitleLen *int64 `json:"title_len"`
		}
		if err := json.Unmarshal(ch.Row, &row); err != nil || row.TitleLen == nil || *row.TitleLen != int64(i+1) {
			t.Fatalf("change %d row %s: want title_len %d (%v)", i, ch.Row, i+1, err)
		}
	}
}
