package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/ssp2"
)

// An id the bus cannot carry is refused before anything is written: a
// partition id longer than the bus allows (its commits would be
// acknowledged and never published) and a client id larger than a bus
// message (every event of the partition would stall behind it).
func TestIDsTheBusCannotCarryAreRefused(t *testing.T) {
	n := startNode(t, vectorSchema, nil)
	push := func(clientID string) []byte {
		b, err := (&ssp2.Message{WireVersion: 1, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1},
			&ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{{Table: "tasks", RowID: "t1", Op: ssp2.OpDelete}}},
		}}).AppendEncode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// A token minted elsewhere, naming a partition id of 2 KiB.
	long := strings.Repeat("p", 2048)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "partition": long, "exp": time.Now().Add(time.Hour).Unix(),
		"scopes": map[string][]string{"project": {"*"}},
	}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := post(t, n.URL()+"/sync", tok, httpapi.ContentType, push("c1"), nil)
	jsonError(t, r, http.StatusBadRequest, ssp2.CodeInvalidRequest)
	if !strings.Contains(string(r.body), "partition") {
		t.Fatalf("the refusal does not say what is wrong: %s", r.body)
	}

	// A client id larger than a bus message.
	ok := token(t, "alice", "acme", map[string][]string{"project": {"*"}})
	jsonError(t, post(t, n.URL()+"/sync", ok, httpapi.ContentType, push(strings.Repeat("c", 1<<20+1)), nil), http.StatusBadRequest, ssp2.CodeInvalidClientID)

	parts, err := n.Store.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.MaxCommitSeq != 0 {
			t.Fatalf("partition %.20q… holds %d commits, want none", p.ID, p.MaxCommitSeq)
		}
	}
}
