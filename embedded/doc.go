// Package embedded gives a syncnode process its NATS: either an embedded
// nats-server (the default) or a connection to an existing NATS deployment
// (external mode). Both modes hand the rest of the node the same *Server:
// a client connection, a jetstream.JetStream bound to the right domain, the
// domain name, and Start and Stop.
//
// # Embedded mode
//
// The server configuration is read from nats.conf with the server's own
// parser (server.ProcessConfigFile), so operators configure clustering,
// leaf remotes, accounts and TLS exactly as the NATS documentation says.
// The node then applies the settings it owns, whatever the file says:
//
//   - JetStream is on and stores under <data dir>/jetstream;
//   - the server does not install signal handlers (the node owns signals);
//   - the server name defaults to "syncnode-<hostname>" when unset;
//   - logs go to the injected *slog.Logger; the server's Fatalf is logged
//     and reported as a start error, it never exits the process;
//   - optional host/port overrides (tests use a random port).
//
// Start checks that every fixed listener port is free before starting and
// returns a *PortInUseError naming the address when it is not (a stock
// nats-server on 4222 and syncnode's default 4223 coexist). Readiness is
// bounded: the listeners must come up and the JetStream API must answer
// (with short per-attempt timeouts, so a cluster that is still electing a
// meta leader is polled, not waited on for the client's 5 s default).
//
// The node talks to its own server over an in-process connection
// (nats.InProcessServer): no TCP, and 2–3× lower request latency than
// loopback.
//
// # External mode
//
// Config.Mode = ModeExternal connects to Config.URLs with an optional
// credentials file and JetStream domain, and waits until JetStream answers.
package embedded
