package edge

import (
	"errors"
	"testing"

	"github.com/syncnode/syncnode/bus"
)

func TestHomes(t *testing.T) {
	h, err := ParseHomes(map[string]string{
		"shop1":         "shop1",
		"shop1-*":       "shop1",
		"shop1-arch*":   "hub",
		"shop2-*":       "shop2",
		"shop2-archive": "hub",
	})
	if err != nil {
		t.Fatal(err)
	}
	for partition, want := range map[string]string{
		"shop1": "shop1", "shop1-a": "shop1", "shop1-archive": "", "shop1-arch": "",
		"shop2-x": "shop2", "shop2-archive": "", "shop2": "", "other": "",
	} {
		if got := h.Of(partition); got != want {
			t.Errorf("Of(%q) = %q, want %q", partition, got, want)
		}
	}
	if got := h.Edges(); len(got) != 2 || got[0] != "shop1" || got[1] != "shop2" {
		t.Errorf("Edges = %v", got)
	}
	if (Homes{}).Of("any") != "" {
		t.Error("the zero Homes homes a partition away from the hub")
	}
}

func TestConfigRefusals(t *testing.T) {
	for name, c := range map[string]Config{
		"edge name":    {Name: "a.b"},
		"home hub":     {Name: "hub"},
		"home name":    {Homes: map[string]string{"p": "bad name"}},
		"empty id":     {Homes: map[string]string{"": "shop1"}},
		"negative":     {PingInterval: -1},
		"page too big": {PageCommits: 10_001},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, c)
		}
	}
	if err := (Config{Name: "shop1", Homes: map[string]string{"p*": "shop1", "q": HubHome}}).WithDefaults().Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
	if err := bus.CheckEdge("hub"); !errors.Is(err, bus.ErrInvalidEdge) {
		t.Errorf("CheckEdge(hub) = %v", err)
	}
}
