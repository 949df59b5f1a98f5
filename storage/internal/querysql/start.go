package querysql

import (
	"errors"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/storage"
)

// The start row of a folded statement (Folded) is one text
// value the store's SQL builds from the partition row and the caller's
// client record, so a query reads them in its own snapshot at the cost of
// one more row instead of one more statement:
//
//	hasPartition,epochRequired,createdAtMs,lastSeenMs,maxCommitSeq,horizonSeq,
//	hasClient,wireVersion,cursor,updatedAtMs,len(logEpoch),len(actorId),len(subscriptions);
//	logEpoch actorId subscriptions
//
// booleans as 0/1, lengths in bytes (-1: subscriptions NULL), the three
// strings back to back after the semicolon. A header holds digits,
// minus signs and commas only, so the first semicolon ends it whatever
// the strings hold.

// ParseStart reads a start row into st (Start.Pushes untouched) and
// reports whether the partition has a row. partition and clientID are
// the query's.
func ParseStart(text, partition, clientID string, st *storage.RequestStart) (hasPartition bool, err error) {
	bad := errors.New("malformed start row")
	head, tail, ok := strings.Cut(text, ";")
	if !ok {
		return false, bad
	}
	var n [13]int64
	for i := range n {
		f, rest, more := strings.Cut(head, ",")
		if more != (i < len(n)-1) {
			return false, bad
		}
		if n[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return false, bad
		}
		head = rest
	}
	str := func(l int64) (string, bool) {
		if l < 0 || l > int64(len(tail)) {
			return "", false
		}
		s := tail[:l]
		tail = tail[l:]
		return s, true
	}
	epoch, ok1 := str(n[10])
	actor, ok2 := str(n[11])
	subs, ok3 := "", true
	if n[12] >= 0 {
		subs, ok3 = str(n[12])
	}
	if !ok1 || !ok2 || !ok3 || tail != "" || n[7] < 0 || n[7] > 0xffff {
		return false, bad
	}
	p := &st.Partition
	*p = storage.Partition{}
	if n[0] == 1 {
		*p = storage.Partition{ID: partition, LogEpoch: epoch, EpochRequired: n[1] == 1, CreatedAtMs: n[2], LastSeenMs: n[3],
			MaxCommitSeq: n[4], HorizonSeq: n[5]}
	}
	st.HasClient = n[6] == 1
	st.Client = storage.Client{}
	if st.HasClient {
		st.Client = storage.Client{Partition: partition, ClientID: clientID, ActorID: actor, WireVersion: uint16(n[7]),
			Cursor: n[8], UpdatedAtMs: n[9]}
		if n[12] >= 0 {
			st.Client.Subscriptions = []byte(subs)
		}
	}
	return n[0] == 1, nil
}
