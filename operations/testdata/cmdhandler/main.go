// Command cmdhandler is a NATS command handler in a process of its own,
// for the operations tests: it renames the todo it was sent (the
// command's declared read) to params.title, and refuses a missing row.
//
//	cmdhandler <nats-url> <subject>
package main

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/operations"
)

func main() {
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = nc.Subscribe(os.Args[2], func(m *nats.Msg) {
		reply, err := handle(m.Data)
		if err != nil {
			reply, _ = operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "error"}, {Key: "message", Value: err.Error()}})
		}
		_ = m.Respond(reply)
	})
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

func handle(b []byte) ([]byte, error) {
	v, err := operations.Decode(b)
	if err != nil {
		return nil, err
	}
	call := v.(operations.Object)
	params, _ := call.Get("params")
	title, _ := params.(operations.Object).Get("title")
	rows, _ := call.Get("rows")
	read := rows.([]any)[0].(operations.Object)
	row, _ := read.Get("row")
	if row == nil {
		return nil, fmt.Errorf("no such todo")
	}
	renamed := operations.Object{}
	for _, f := range row.(operations.Object) {
		if f.Key == "title" {
			f.Value = title
		}
		renamed = append(renamed, f)
	}
	return operations.Encode(operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "mutations"},
		{Key: "mutations", Value: []any{operations.Object{{Key: "op", Value: "upsert"}, {Key: "table", Value: "todos"}, {Key: "row", Value: renamed}}}}})
}
