package storage

// WindowPlanner is implemented by the ReadTx of a store that can read a
// commit window with the transaction's first read, in one round trip with
// its begin and its end (PostgreSQL). It is optional; a store without it
// reads as asked.
//
// PlanWindow, called before the transaction's first read, names the
// CommitWindow that fn expects to make after reading p.Partition's row
// (ReadTx.Partition). The store may then read the row, its gate state and
// the window's first commits, and end the transaction, at once. When fn
// goes on to read anything the plan did not cover (another window, a
// bootstrap's reads, a window longer than the first read), the store runs
// fn again from the start in a fresh transaction, without the plan: a fn
// that plans must be safe to run twice, assigning what it reads and
// nothing else.
type WindowPlanner interface {
	PlanWindow(p WindowParams)
}
