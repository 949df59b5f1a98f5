package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/syncnode/syncnode/storage"
)

// Durable reactions on the bus (package reactions): worker requests and
// lifecycle events. Both live under their own root, outside sync.>, so a
// leaf's deny_exports on sync.> does not hide them and `nats sub 'sync.>'`
// shows commits only.
//
//	reaction-work  = "syncreact.work." type                       (core request/reply, one queue group of workers)
//	reaction-event = "syncreact.event." partition "." event "." type (core publish, fire and forget)
//	type           = letter *( [A-Za-z0-9_-] ) *( "." 1*[A-Za-z0-9_-] )  (at most 128 bytes)
//	event          = "enqueued" | "completed" | "failed" | "dead_lettered" | "requeued"
//
// A dotted type spans several tokens, so `nats reply 'syncreact.work.email.>'`
// serves every email.* type. The type comes last in event subjects for the
// same reason.
//
// In an isolated namespace both roots carry its prefix, like every other
// subject (Names).
const (
	reactionWorkPrefix  = "syncreact.work."
	reactionEventPrefix = "syncreact.event."
)

// ReactionWork matches every worker request: syncreact.work.>.
func (n Names) ReactionWork() string { return n.subject(reactionWorkPrefix + ">") }

// ReactionEvents matches every lifecycle event: syncreact.event.>.
func (n Names) ReactionEvents() string { return n.subject(reactionEventPrefix + ">") }

// Reaction lifecycle events (the event token).
const (
	// ReactionEnqueued: a commit that planned the reaction is durable.
	ReactionEnqueued = "enqueued"
	// ReactionCompleted: a handler or worker completed it.
	ReactionCompleted = "completed"
	// ReactionFailed: an attempt failed and a retry is scheduled.
	ReactionFailed = "failed"
	// ReactionDeadLettered: it failed for good (permanently, or its
	// attempts ran out) and waits for an operator.
	ReactionDeadLettered = "dead_lettered"
	// ReactionRequeued: an operator retried a dead letter. Runners wake
	// on it.
	ReactionRequeued = "requeued"
)

// ReactionEvents lists the lifecycle events.
var ReactionEvents = []string{ReactionEnqueued, ReactionCompleted, ReactionFailed, ReactionDeadLettered, ReactionRequeued}

// Headers of a worker request.
const (
	// HeaderIdempotencyKey carries the reaction's idempotency key: pass
	// it on to systems that collapse repeated requests.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReactionAttempt carries the attempt number (1, 2, …).
	HeaderReactionAttempt = "Reaction-Attempt"
	// HeaderReactionDeadline carries the lease expiry in Unix ms: a reply
	// after it is ignored and the reaction is retried.
	HeaderReactionDeadline = "Reaction-Deadline"
	// HeaderReactionType carries the type (ce-reactiontype on events).
	HeaderReactionType = "ce-reactiontype"
)

// EventTypeReactionPrefix starts the ce-type of lifecycle events:
// dev.syncnode.reaction.<event>.v1.
const EventTypeReactionPrefix = "dev.syncnode.reaction."

// ReactionEventType is the ce-type of a lifecycle event.
func ReactionEventType(event string) string { return EventTypeReactionPrefix + event + ".v1" }

// ReactionWorkSubject is syncreact.work.<type>.
func (n Names) ReactionWorkSubject(typ string) (string, error) {
	if err := storage.CheckReactionType(typ); err != nil {
		return "", err
	}
	return n.subject(reactionWorkPrefix + typ), nil
}

// ReactionEventSubject is syncreact.event.<partition>.<event>.<type>.
func (n Names) ReactionEventSubject(p Partition, event, typ string) (string, error) {
	if err := checkReactionEvent(event); err != nil {
		return "", err
	}
	if err := storage.CheckReactionType(typ); err != nil {
		return "", err
	}
	return n.subject(reactionEventPrefix + p.token + "." + event + "." + typ), nil
}

// ReactionEventFilter is syncreact.event.*.<event>.>: one event of every
// partition and type.
func (n Names) ReactionEventFilter(event string) (string, error) {
	if err := checkReactionEvent(event); err != nil {
		return "", err
	}
	return n.subject(reactionEventPrefix + "*." + event + ".>"), nil
}

// ParseReactionEventSubject splits syncreact.event.<token>.<event>.<type>
// of this namespace.
func (n Names) ParseReactionEventSubject(subject string) (token, event, typ string, ok bool) {
	rest, ok := n.unprefix(subject)
	if ok {
		rest, ok = strings.CutPrefix(rest, reactionEventPrefix)
	}
	if !ok {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || !validToken(parts[0]) || checkReactionEvent(parts[1]) != nil || storage.CheckReactionType(parts[2]) != nil {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// validToken reports whether tok is a token the escaper or the hasher
// can have produced.
func validToken(tok string) bool {
	if _, err := ParseToken(tok); err == nil {
		return true
	} else if !errors.Is(err, ErrHashedToken) || len(tok) != HashedTokenLen {
		return false
	}
	for i := len(hashedPrefix); i < len(tok); i++ {
		if c := tok[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func checkReactionEvent(event string) error {
	for _, e := range ReactionEvents {
		if e == event {
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not a reaction event", ErrInvalidEvent, event)
}

// ReactionEvent is one lifecycle event before encoding.
type ReactionEvent struct {
	Event     string
	Partition Partition
	Type      string
	Time      time.Time
	// Data is the JSON body.
	Data any
}

// NewReactionEventMsg encodes a lifecycle event as a CloudEvent in binary
// content mode, like commit and control events: ce-id <node>:<nuid>,
// ce-type dev.syncnode.reaction.<event>.v1, ce-subject
// <partition token>/<type>, extensions ce-partition, ce-event and
// ce-reactiontype, and a JSON body.
func NewReactionEventMsg(n Names, node string, ev ReactionEvent) (*nats.Msg, error) {
	subject, err := n.ReactionEventSubject(ev.Partition, ev.Event, ev.Type)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("encode reaction event: %w", err)
	}
	h := make(nats.Header, 12)
	h[HeaderSpecVersion] = hvSpecVersion
	h[HeaderID] = []string{node + ":" + nuid.Next()}
	h[HeaderType] = []string{ReactionEventType(ev.Event)}
	h[HeaderSource] = []string{Source(node)}
	h[HeaderTime] = []string{ev.Time.UTC().Format(timeLayoutMillis)}
	h[HeaderSubject] = []string{ev.Partition.token + "/" + ev.Type}
	h[HeaderContentType] = hvContentType
	h[HeaderPartition] = []string{ev.Partition.token}
	h[HeaderEventName] = []string{ev.Event}
	h[HeaderReactionType] = []string{ev.Type}
	if ev.Partition.Hashed() {
		h[HeaderSyncPartition] = []string{ev.Partition.escaped}
	}
	return &nats.Msg{Subject: subject, Header: h, Data: body}, nil
}
