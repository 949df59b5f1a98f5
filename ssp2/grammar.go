package ssp2

import "slices"

// grammar is the frame-order state machine of §1.2 rules 2 and 4, §1.5 and
// §1.6. Decoding, Message encoding and the streaming ResponseEncoder all
// drive the same machine, so no path can accept or emit an order another
// rejects. check is pure and returns the violation ("" when legal); apply
// advances the state and must follow a successful check.
type grammar struct {
	kind   MsgKind
	frames int // frames accepted so far; 0 means the header is expected

	// Request state.
	pushes int
	pull   bool

	// Response state.
	lease   bool // LEASE seen
	body    bool // a PUSH_RESULT, subscription section or ERROR began
	subs    bool // a subscription section began: no more PUSH_RESULTs
	inSub   bool
	subRows bool // the open section carried COMMIT frames
	subSegs bool // the open section carried segment frames
	errored bool

	// The PUSH_RESULT that a PUSH_RESULT_DETAILS may still follow: the last
	// known frame was that result (unknown frames in between are ignored).
	result         bool
	resultID       string
	resultRejected bool
	resultErrors   []int32 // opIndex of its error records, sorted
}

func newGrammar(kind MsgKind) grammar { return grammar{kind: kind} }

func (g *grammar) check(f Frame) string {
	t := f.FrameType()
	if g.frames == 0 {
		if g.kind == KindRequest && t != FrameReqHeader {
			return "a request must start with REQ_HEADER, not " + t.String()
		}
		if g.kind == KindResponse && t != FrameRespHeader {
			return "a response must start with RESP_HEADER, not " + t.String()
		}
		return ""
	}
	if g.errored {
		return t.String() + " after ERROR: only END may follow"
	}
	if _, ok := f.(*Unknown); ok {
		return ""
	}
	if k := t.kind(); k != g.kind {
		if k == 0 {
			return t.String() + " is not a frame"
		}
		return t.String() + " is a " + k.String() + " frame and illegal in a " + g.kind.String()
	}
	if g.kind == KindRequest {
		return g.checkRequest(t)
	}
	return g.checkResponse(f, t)
}

func (g *grammar) checkRequest(t FrameType) string {
	switch t {
	case FrameReqHeader:
		return "duplicate REQ_HEADER"
	case FramePushCommit:
		if g.pull {
			return "PUSH_COMMIT after PULL_HEADER"
		}
	case FramePullHeader:
		if g.pull {
			return "duplicate PULL_HEADER"
		}
	case FrameSubscription:
		if !g.pull {
			return "SUBSCRIPTION without a preceding PULL_HEADER"
		}
	}
	return ""
}

func (g *grammar) checkResponse(f Frame, t FrameType) string {
	switch t {
	case FrameRespHeader:
		return "duplicate RESP_HEADER"
	case FrameLease:
		if g.lease {
			return "duplicate LEASE"
		}
		if g.body {
			return "LEASE must directly follow RESP_HEADER"
		}
	case FramePushResult:
		if g.subs {
			return "PUSH_RESULT after a subscription section"
		}
	case FramePushResultDetails:
		if !g.result {
			return "PUSH_RESULT_DETAILS must directly follow its PUSH_RESULT"
		}
		d := f.(*PushResultDetails)
		if !g.resultRejected {
			return "PUSH_RESULT_DETAILS follows a PUSH_RESULT that is not rejected"
		}
		if d.ClientCommitID != g.resultID {
			return "PUSH_RESULT_DETAILS.clientCommitId does not match its PUSH_RESULT"
		}
		for _, e := range d.Entries {
			if _, found := slices.BinarySearch(g.resultErrors, e.OpIndex); !found {
				return "PUSH_RESULT_DETAILS entry does not match an error result of its PUSH_RESULT"
			}
		}
	case FrameSubStart:
		if g.inSub {
			return "SUB_START inside an open subscription section"
		}
	case FrameCommit:
		if !g.inSub {
			return "COMMIT outside a subscription section"
		}
		if g.subSegs {
			return "COMMIT and segment frames mixed in one subscription section"
		}
	case FrameSegmentRef, FrameSegmentInline:
		if !g.inSub {
			return t.String() + " outside a subscription section"
		}
		if g.subRows {
			return "COMMIT and segment frames mixed in one subscription section"
		}
	case FrameSubEnd:
		if !g.inSub {
			return "SUB_END without an open SUB_START"
		}
	}
	return ""
}

func (g *grammar) apply(f Frame) {
	g.frames++
	t := f.FrameType()
	if _, ok := f.(*Unknown); ok || g.frames == 1 {
		return
	}
	if t != FramePushResult {
		g.result = false
	}
	switch t {
	case FramePushCommit:
		g.pushes++
	case FramePullHeader:
		g.pull = true
	case FrameLease:
		g.lease = true
	case FramePushResult:
		r := f.(*PushResult)
		g.body = true
		g.result = true
		g.resultID = r.ClientCommitID
		g.resultRejected = r.Status == PushRejected
		g.resultErrors = g.resultErrors[:0]
		for _, o := range r.Results {
			if o.Status == OpError {
				g.resultErrors = append(g.resultErrors, o.OpIndex)
			}
		}
		slices.Sort(g.resultErrors) // for binary search: a details frame may be long
	case FramePushResultDetails:
		g.body = true
	case FrameSubStart:
		g.body, g.subs, g.inSub = true, true, true
		g.subRows, g.subSegs = false, false
	case FrameCommit:
		g.subRows = true
	case FrameSegmentRef, FrameSegmentInline:
		g.subSegs = true
	case FrameSubEnd:
		g.inSub = false
	case FrameError:
		g.body, g.errored = true, true
	}
}

// end checks what must hold when END arrives.
func (g *grammar) end() string {
	switch {
	case g.frames == 0 && g.kind == KindRequest:
		return "a request must start with REQ_HEADER, not END"
	case g.frames == 0:
		return "a response must start with RESP_HEADER, not END"
	case g.kind == KindRequest && g.pushes == 0 && !g.pull:
		return "a request with neither PUSH_COMMIT nor PULL_HEADER"
	case g.kind == KindResponse && g.inSub && !g.errored:
		return "END inside an open subscription section (missing SUB_END)"
	}
	return ""
}
