package bus

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Control events: the serve gate's migration events on
// syncctl.<partition>.<event>, and node-wide ones on
// syncctl.=global.<event>. "=global" cannot be a partition token: the
// escaper writes '=' only before two uppercase hex digits, and "gl" is
// not hex.
const (
	// GlobalToken stands in for the partition in subjects of node-wide
	// control events.
	GlobalToken = "=global"
)

// Control event names (the last subject token).
const (
	EventCheckpointDeclared     = "checkpoint_declared"
	EventCheckpointClaimed      = "checkpoint_claimed"
	EventCheckpointAdvanced     = "checkpoint_advanced"
	EventCheckpointActivated    = "checkpoint_activated"
	EventCheckpointStale        = "checkpoint_stale"
	EventCheckpointUnverifiable = "checkpoint_unverifiable"
	EventEpochRotated           = "epoch_rotated"
	EventSchemaMigrated         = "schema_migrated"
)

// EventTypeControlPrefix starts the ce-type of control events:
// dev.syncnode.control.<event>.v1.
const EventTypeControlPrefix = "dev.syncnode.control."

// ControlEventType is the ce-type of a control event.
func ControlEventType(event string) string { return EventTypeControlPrefix + event + ".v1" }

// Serve-gate KV keys (bucket Names.GateBucket). Partition tokens live under
// gate.<partition> (GateKey); the node-wide schema token is one key
// outside that space.
const (
	// GateSchemaKey holds the stored schema version and its revision.
	GateSchemaKey = "schema.current"
	// GateKeys matches every partition token: gate.*.
	GateKeys   = gatePrefix + "*"
	gatePrefix = "gate."
)

// ParseGateKey returns the partition token of a gate.<partition> key.
func ParseGateKey(key string) (token string, ok bool) {
	token, ok = strings.CutPrefix(key, gatePrefix)
	return token, ok && token != "" && !strings.Contains(token, ".")
}

// GateBucketConfig is the KV configuration of the gate bucket: a few
// revisions of history for operators, no TTL (a token lives until
// rebuilt), so NATS-NOTES pitfall 4 (TTL clamped by history) does not
// apply.
func (n Names) GateBucketConfig(replicas int) jetstream.KeyValueConfig {
	if replicas < 1 {
		replicas = 1
	}
	return jetstream.KeyValueConfig{
		Bucket:      n.GateBucket(),
		Description: "syncnode serve-gate tokens: gate.<partition>, schema.current",
		History:     8,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

// ControlEvent is one control event before encoding.
type ControlEvent struct {
	// Event is the event name (EventCheckpointDeclared, …).
	Event string
	// Partition is the partition the event is about; nil for node-wide
	// events (syncctl.=global.<event>).
	Partition *Partition
	// Subject is the ce-subject, e.g. <partition token>/<checkpoint>.
	Subject string
	Time    time.Time
	// Data is the JSON body.
	Data any
}

// HeaderEventName carries a control event's name (ce-event).
const HeaderEventName = "ce-event"

// NewControlMsg encodes a control event of namespace names as a
// CloudEvent in binary content mode, like commit events: ce-* headers and
// a JSON body. Its ce-id is unique (<node>:<nuid>) and doubles as
// Nats-Msg-Id, so a retried publish is stored once.
func NewControlMsg(names Names, node string, ev ControlEvent) (*nats.Msg, error) {
	var (
		subject string
		err     error
		token   = GlobalToken
	)
	if ev.Partition != nil {
		token = ev.Partition.token
		subject, err = names.ControlSubject(*ev.Partition, ev.Event)
	} else {
		subject, err = names.GlobalControlSubject(ev.Event)
	}
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("encode control event: %w", err)
	}
	id := node + ":" + nuid.Next()
	h := make(nats.Header, 12)
	h[HeaderSpecVersion] = hvSpecVersion
	h[HeaderID] = []string{id}
	h[HeaderType] = []string{ControlEventType(ev.Event)}
	h[HeaderSource] = []string{Source(node)}
	h[HeaderTime] = []string{ev.Time.UTC().Format(timeLayoutMillis)}
	if ev.Subject != "" {
		h[HeaderSubject] = []string{ev.Subject}
	}
	h[HeaderContentType] = hvContentType
	h[HeaderPartition] = []string{token}
	h[HeaderEventName] = []string{ev.Event}
	h[jetstream.MsgIDHeader] = []string{id}
	if ev.Partition != nil && ev.Partition.Hashed() {
		h[HeaderSyncPartition] = []string{ev.Partition.escaped}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: body}, nil
}
