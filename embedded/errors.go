package embedded

import (
	"errors"
	"fmt"
)

// ErrPortInUse matches a *PortInUseError with errors.Is.
var ErrPortInUse = errors.New("port in use")

// ErrNotReady is returned by Start when the server's listeners or its
// JetStream API did not become ready within Config.ReadyTimeout.
var ErrNotReady = errors.New("nats not ready")

// ErrAuthRequired is returned by Start when nats.conf authenticates
// clients and Config.User is empty: the node's own connections need a
// user too.
var ErrAuthRequired = errors.New("nats requires authentication")

// ErrLeafNotIsolated is returned by Server.CheckLeafIsolation for a leaf
// remote that lets one of the node's subjects cross the link.
var ErrLeafNotIsolated = errors.New("leaf remote does not isolate the node's subjects")

// PortInUseError is returned by Start when a fixed listener port of the
// embedded server is already taken, for example by a stock nats-server on
// 4222. Addr is the host:port that could not be bound.
type PortInUseError struct {
	Listener string // "client", "cluster", "leafnode", …
	Addr     string
	Err      error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("start nats: %s listener address %s is already in use (another NATS server or syncnode?): set a free port in nats.conf: %v",
		e.Listener, e.Addr, e.Err)
}

// Unwrap returns the listen error.
func (e *PortInUseError) Unwrap() error { return e.Err }

// Is matches ErrPortInUse.
func (e *PortInUseError) Is(target error) bool { return target == ErrPortInUse }

// FatalError is a fatal error the embedded server reported while starting
// (it would have exited a standalone nats-server). Start returns it after
// shutting the server down.
type FatalError struct {
	Msg string
}

func (e *FatalError) Error() string { return "start nats: server fatal error: " + e.Msg }
