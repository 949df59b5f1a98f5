package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/syncnode/syncnode/"

// layers are ARCHITECTURE.md's "Who may import whom", top first: a
// package imports only packages of lower layers. A package not listed
// belongs to the entry of its closest listed parent directory; the
// packages under one internal entry may import each other.
var layers = [][]string{
	{"cmd", "reliability"},
	{"testctl", "loadgen"},
	{"node"},
	{"loadfix", "reactions"},
	{"realtime", "admin"},
	{"relay", "segments", "blobs", "gate", "httpapi", "backfill", "rules", "hooks", "leases", "operations", "edge"},
	{"engine", "bus", "storage/sqlitestore", "storage/pgstore"},
	{"storage/internal"},
	{"storage", "auth", "client", "signedurl"},
	{"schema", "sqliteimage"},
	{"ssp2", "embedded"},
	{"internal"},
}

// testHelpers are imported by tests only, so they may reach anywhere.
var testHelpers = []string{"storage/storagetest", "storage/pgstore/pgtest", "embedded/embeddedtest", "bus/bustest",
	"internal/poll", "internal/testvectors", "internal/nodetest", "internal/proxytest"}

// layerOf is the layer index and entry of a package path relative to
// the module.
func layerOf(rel string) (int, string, bool) {
	for p := rel; p != "."; p = filepath.Dir(p) {
		for i, l := range layers {
			if slices.Contains(l, p) {
				return i, p, true
			}
		}
	}
	return 0, "", false
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// TestLayers: every package's imports (tests aside) point down the layers.
func TestLayers(t *testing.T) {
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if slices.Contains(testHelpers, rel) || rel == "internal/archtest" {
			continue
		}
		from, entry, ok := layerOf(rel)
		if !ok {
			t.Errorf("%s is in no layer: add it to ARCHITECTURE.md and this test", rel)
			continue
		}
		for _, imp := range p.Imports {
			irel, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			to, ientry, ok := layerOf(irel)
			sibling := entry == ientry && strings.HasSuffix(entry, "internal")
			if slices.Contains(testHelpers, irel) {
				t.Errorf("%s imports the test helper %s", rel, irel)
			} else if ok && to <= from && !sibling {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down", rel, from, irel, to)
			}
		}
	}
}

// TestBoundaries: the engine is free of NATS, the codec of net/http, and
// each driver has one importer.
func TestBoundaries(t *testing.T) {
	only := map[string]string{ // dependency prefix → the one package that may import it
		"modernc.org/sqlite":                 "storage/sqlitestore",
		"github.com/jackc/pgx":               "storage/pgstore",
		"github.com/nats-io/nats-server/v2/": "embedded",
	}
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, d := range p.Deps {
			switch {
			case rel == "engine" && (strings.Contains(d, "nats") || strings.HasPrefix(d, module+"bus")):
				t.Errorf("engine depends on %s", d)
			case rel == "ssp2" && d == "net/http":
				t.Errorf("ssp2 depends on net/http")
			}
		}
		for _, imp := range p.Imports {
			for dep, owner := range only {
				if strings.HasPrefix(imp, dep) && rel != owner && !strings.HasPrefix(rel, owner+"/") {
					t.Errorf("%s imports %s; only %s may", rel, imp, owner)
				}
			}
		}
	}
}
