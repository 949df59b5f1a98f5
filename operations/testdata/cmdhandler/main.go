// Command cmdhandler is a NATS command handler in a process of its own,
// for the operations tests. It serves two commands:
//
//   - renameTodo renames the todo it was sent (the command's declared
//     read) to params.title, and refuses a missing row;
//
//   - finishProject reads through the call's read subject, inside the
//     command's transaction: the registered query "todos" for
//     params.project, then each open todo's full row by key, and marks
//     them done. A refused read (a project the caller is not granted) is
//     the handler's error.
//
//     cmdhandler <nats-url> <subject>...
package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/operations"
)

func main() {
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, subject := range os.Args[2:] {
		if err == nil {
			_, err = nc.Subscribe(subject, func(m *nats.Msg) {
				reply, err := handle(nc, m.Data)
				if err != nil {
					reply, _ = operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "error"}, {Key: "message", Value: err.Error()}})
				}
				_ = m.Respond(reply)
			})
		}
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func get(o operations.Object, k string) any { v, _ := o.Get(k); return v }

func handle(nc *nats.Conn, b []byte) ([]byte, error) {
	v, err := operations.Decode(b)
	if err != nil {
		return nil, err
	}
	call := v.(operations.Object)
	params := get(call, "params").(operations.Object)
	var muts []any
	switch get(call, "operationId") {
	case "renameTodo":
		read := get(call, "rows").([]any)[0].(operations.Object)
		row := get(read, "row")
		if row == nil {
			return nil, fmt.Errorf("no such todo")
		}
		muts = append(muts, upsert(row.(operations.Object), "title", get(params, "title")))
	case "finishProject":
		readSubject, _ := get(call, "readSubject").(string)
		res, err := read(nc, readSubject, operations.Object{{Key: "kind", Value: "query"}, {Key: "operationId", Value: "todos"},
			{Key: "params", Value: []any{get(params, "project")}}})
		if err != nil {
			return nil, err
		}
		for _, r := range get(res, "rows").([]any) {
			r := r.(operations.Object)
			if get(r, "done") == true {
				continue
			}
			got, err := read(nc, readSubject, operations.Object{{Key: "kind", Value: "getRow"}, {Key: "table", Value: "todos"}, {Key: "rowId", Value: get(r, "id")}})
			if err != nil {
				return nil, err
			}
			muts = append(muts, upsert(get(got, "row").(operations.Object), "done", true))
		}
	default:
		return nil, fmt.Errorf("no command %v here", get(call, "operationId"))
	}
	return operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "mutations"}, {Key: "mutations", Value: muts}})
}

// read sends one read to the call's read subject; an error answer is an
// error.
func read(nc *nats.Conn, subject string, req operations.Object) (operations.Object, error) {
	body, err := operations.Encode(append(operations.Object{{Key: "revision", Value: int64(1)}}, req...))
	if err != nil {
		return nil, err
	}
	m, err := nc.Request(subject, body, 5*time.Second)
	if err != nil {
		return nil, err
	}
	v, err := operations.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	o := v.(operations.Object)
	if get(o, "kind") == "error" {
		return nil, errors.New(get(o, "code").(string))
	}
	return o, nil
}

// upsert is the row with one column set.
func upsert(row operations.Object, column string, value any) operations.Object {
	out := operations.Object{}
	for _, f := range row {
		if f.Key == column {
			f.Value = value
		}
		out = append(out, f)
	}
	return operations.Object{{Key: "op", Value: "upsert"}, {Key: "table", Value: "todos"}, {Key: "row", Value: out}}
}
