package bus

import "fmt"

// Subjects of the remote operations' NATS binding (REMOTE.md, package
// operations), in the namespace's prefix:
//
//	requests   syncops.request             (queue group syncops: one node answers)
//	commands   syncops.command.<operationId> (a command handler process answers)
//
// A caller sends an encoded operation request to OperationRequests with
// its bearer token in the Authorization header; the node that takes it
// authenticates the token as HTTP does and replies with the encoded
// response. A command registered as implemented over NATS is sent to
// OperationCommand(id) by the node running it, under the partition lock;
// the handler replies with the command's mutations.
const (
	opsRequest       = "syncops.request"
	opsCommandPrefix = "syncops.command."
	// OperationsQueueGroup load-balances operation requests across nodes.
	OperationsQueueGroup = "syncops"
)

// OperationRequests is the subject of operation requests.
func (n Names) OperationRequests() string { return n.subject(opsRequest) }

// OperationCommand is the subject a NATS-implemented command's handler
// listens on. The id must be one subject token of [A-Za-z0-9_-].
func (n Names) OperationCommand(operationID string) (string, error) {
	if !plainToken(operationID) {
		return "", fmt.Errorf("operation id %q is not one subject token of [A-Za-z0-9_-]", operationID)
	}
	return n.subject(opsCommandPrefix + operationID), nil
}

// plainToken reports whether s is 1..128 bytes of [A-Za-z0-9_-].
func plainToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
