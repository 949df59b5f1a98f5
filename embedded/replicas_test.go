package embedded

import (
	"testing"
)

// TestClusterExampleIsR3 loads the documented cluster member config and
// checks the replication factor the node derives from it.
func TestClusterExampleIsR3(t *testing.T) {
	t.Parallel()
	opts, err := LoadOptions(Config{ConfigFile: "../docs/nats/cluster-node.conf", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.Name != "syncnode" || opts.Cluster.Port != 6222 {
		t.Fatalf("cluster block: %q port %d", opts.Cluster.Name, opts.Cluster.Port)
	}
	if got := clusterSize(opts); got != 3 {
		t.Fatalf("cluster size %d, want 3", got)
	}
	// The node config's cluster block overrides the file's.
	opts, err = LoadOptions(Config{ConfigFile: "../docs/nats/cluster-node.conf", DataDir: t.TempDir(),
		Cluster: ClusterConfig{Port: 7000, Routes: []string{"nats-route://a:7000", "nats-route://b:7000"}}})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.Port != 7000 || clusterSize(opts) != 2 {
		t.Fatalf("override: port %d, size %d", opts.Cluster.Port, clusterSize(opts))
	}
}

func TestReplicasFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ configured, servers, want int }{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 3}, {0, 5, 3}, {1, 3, 1}, {5, 1, 5},
	} {
		if got := replicasFor(c.configured, c.servers); got != c.want {
			t.Errorf("replicasFor(%d, %d) = %d, want %d", c.configured, c.servers, got, c.want)
		}
	}
}

func TestClusterValidation(t *testing.T) {
	t.Parallel()
	bad := []Config{
		{DataDir: "d", Cluster: ClusterConfig{Routes: []string{"nats-route://a:1"}}},         // no port
		{DataDir: "d", Cluster: ClusterConfig{Port: 6222, Routes: []string{"http://a:1"}}},   // not a route
		{Mode: ModeExternal, URLs: []string{"nats://x"}, Cluster: ClusterConfig{Port: 6222}}, // external
		{DataDir: "d", Replicas: 6},
	}
	for i, c := range bad {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("config %d: valid, want an error", i)
		}
	}
	if err := (Config{DataDir: "d", Replicas: 3, Cluster: ClusterConfig{Port: -1, Routes: []string{"nats-route://a:1"}}}).WithDefaults().Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
