package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/syncnode/syncnode/operations"
)

const opsUsage = `Usage:
  syncnode ops call --id ID [--params JSON] [--kind query|command] [--request-id ID]
                    [--client-id ID] [--url URL] [--token TOKEN]

Runs a registered remote operation (POST /operations) and prints the
response as JSON. A query's params are a JSON array of its positional
values; a command's are any JSON value (an object, usually). --kind
defaults to command when --request-id is given, else query; a command
without --request-id gets a random one (a retry must reuse it).
`

func runOps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, opsUsage)
		return nil
	}
	if args[0] != "call" {
		fmt.Fprint(stderr, opsUsage)
		return fmt.Errorf("unknown ops command %q", args[0])
	}
	fs := flag.NewFlagSet("ops call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", os.Getenv("SYNCNODE_URL"), "node URL, e.g. http://127.0.0.1:8080")
	token := fs.String("token", os.Getenv("SYNCNODE_TOKEN"), "bearer token (see: syncnode client token)")
	id := fs.String("id", "", "operation id")
	params := fs.String("params", "", "params as JSON (default: [] for a query, {} for a command)")
	kind := fs.String("kind", "", "query or command")
	reqID := fs.String("request-id", "", "command request id (the idempotency key with --id)")
	clientID := fs.String("client-id", "syncnode-ops", "client id of the caller")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *id == "" || *url == "" {
		return errors.New("ops call: --id and --url are required")
	}
	k := *kind
	if k == "" {
		k = "query"
		if *reqID != "" {
			k = "command"
		}
	}
	if k != "query" && k != "command" {
		return fmt.Errorf("ops call: --kind %q is neither query nor command", k)
	}
	p := *params
	if p == "" {
		p = map[string]string{"query": "[]", "command": "{}"}[k]
	}
	pv, err := operations.FromJSON([]byte(p))
	if err != nil {
		return fmt.Errorf("ops call: --params: %w", err)
	}
	req := operations.Object{{Key: "revision", Value: int64(1)}, {Key: "kind", Value: k}, {Key: "clientId", Value: *clientID}, {Key: "operationId", Value: *id}}
	if k == "command" {
		r := *reqID
		if r == "" {
			var b [8]byte
			_, _ = rand.Read(b[:])
			r = hex.EncodeToString(b[:])
		}
		req = append(req, operations.Field{Key: "requestId", Value: r})
	}
	req = append(req, operations.Field{Key: "params", Value: pv})
	body, err := operations.Encode(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(*url, "/")+"/operations", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", operations.MediaType)
	if *token != "" {
		hr.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return fmt.Errorf("ops call: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("ops call: %w", err)
	}
	if resp.Header.Get("Content-Type") != operations.MediaType {
		return fmt.Errorf("ops call: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	v, err := operations.Decode(b)
	if err != nil {
		return fmt.Errorf("ops call: response: %w", err)
	}
	out, _ := json.MarshalIndent(operations.ToJSONOrdered(v), "", "  ")
	fmt.Fprintln(stdout, string(out))
	if o, _ := v.(operations.Object); o != nil {
		if kv, _ := o.Get("kind"); kv == "error" {
			code, _ := o.Get("code")
			return fmt.Errorf("ops call: %v", code)
		}
	}
	return nil
}
