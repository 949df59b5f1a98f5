package relay

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/bus"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (Config{Node: "node-1.eu_west"}).WithDefaults().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no node", Config{}, "Node is required"},
		{"node with a space", Config{Node: "node 1"}, "Node:"},
		{"node with a dot-star", Config{Node: "n.*"}, "Node:"},
		{"batch too large", Config{Node: "n", BatchMessages: MaxBatchMessages + 1}, "BatchMessages"},
		{"no workers", Config{Node: "n", Workers: -1}, "Workers"},
		{"retry bounds reversed", Config{Node: "n", RetryMin: 2, RetryMax: 1}, "RetryMin"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	if err := (Config{Node: "a/b"}).WithDefaults().Validate(); !errors.Is(err, bus.ErrInvalidNode) {
		t.Errorf("bad node: %v, want bus.ErrInvalidNode", err)
	}
}
