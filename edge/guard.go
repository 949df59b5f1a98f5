package edge

import (
	"context"
	"errors"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Guard is an edge's engine.Router: every partition homed elsewhere (at
// the hub or at another edge) is remote, and refused. An edge holds no
// replica of anything and forwards nothing; serving a foreign partition
// would register it under an epoch of the edge's and fork its log.
type Guard struct {
	name  string
	homes Homes
}

// NewGuard returns the router of the edge cfg.Name.
func NewGuard(cfg Config) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return nil, errors.New("edge: Guard needs Config.Name")
	}
	homes, _ := ParseHomes(cfg.Homes)
	return &Guard{name: cfg.Name, homes: homes}, nil
}

// Remote implements engine.Router: the partition is not homed here.
func (g *Guard) Remote(partition string) bool { return g.homes.Of(partition) != g.name }

// Forward implements engine.Router: a push is refused, nothing applied.
func (g *Guard) Forward(_ context.Context, id engine.Identity, _ *ssp2.Request) (map[string]storage.PushRecord, error) {
	return nil, g.refusal(id.Partition)
}

// Ready implements engine.Router: a pull, realtime attach or download is
// refused.
func (g *Guard) Ready(_ context.Context, partition string) error { return g.refusal(partition) }

// refusal is sync.forbidden (HTTP 403, not retryable: retrying here never
// helps), details {"reason":"not_home","home":<edge or "hub">,"edge":<this
// edge>}: the client is pointed at the wrong node.
func (g *Guard) refusal(partition string) error {
	home := g.homes.Of(partition)
	if home == "" {
		home = HubHome
	}
	return ssp2.Errorf(ssp2.CodeForbidden, "this partition is homed at %s, not at edge %s: sync it there", home, g.name).
		WithDetails(map[string]string{"reason": "not_home", "home": home, "edge": g.name})
}
