package main

import (
	_ "embed"
	"fmt"

	"github.com/syncnode/syncnode/schema"
)

// exampleSchemaJSON is the bundled example schema: what a node serves and
// the client commands speak when no schema file is given.
//
//go:embed example-schema.json
var exampleSchemaJSON []byte

// loadSchema reads the schema IR at path, or the bundled example schema
// when path is empty.
func loadSchema(path string) (*schema.Schema, error) {
	if path != "" {
		return schema.Load(path)
	}
	s, err := schema.Parse(exampleSchemaJSON)
	if err != nil {
		return nil, fmt.Errorf("bundled example schema: %w", err)
	}
	return s, nil
}
