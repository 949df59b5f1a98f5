package node

import "github.com/syncnode/syncnode/backfill"

// Backfiller returns a backfill runner (package backfill) that drives
// this node's serve gate and writes each batch through its engine (cfg's
// Gate and Writer are replaced), with the node's clock and logger unless
// cfg sets its own. The checkpoints it
// runs must be among Config.Checkpoints, so that this node serves their
// partitions while they backfill; a runner may be used concurrently for
// different jobs.
func (n *Node) Backfiller(cfg backfill.Config) (*backfill.Runner, error) {
	cfg.Gate, cfg.Writer = n.Gate, n.Engine
	if cfg.Clock == nil {
		cfg.Clock = n.cfg.Clock
	}
	if cfg.Logger == nil {
		cfg.Logger = n.log.With("component", "backfill")
	}
	return backfill.New(cfg)
}
