package main

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Exit statuses and output shared by every subcommand.

// exitError carries a process exit status: 2 for bad input, 1 for everything else.
type exitError struct {
	code int
	err  error
	// logged: the error is in the command's log already; main prints nothing more.
	logged bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// outputFormat reads -o: table (also "text", its earlier name), json or yaml.
func outputFormat(o string) (string, error) {
	switch o {
	case "table", "text":
		return "table", nil
	case "json", "yaml":
		return o, nil
	}
	return "", usageError("--output must be table, json or yaml, got %q", o)
}

// writeStructured writes v in the -o json or -o yaml form; yaml has the JSON field names.
func writeStructured(w io.Writer, v any, format string) error {
	if format != "yaml" {
		return writeJSON(w, v)
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("write YAML: %w", err)
	}
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("write YAML: %w", err)
	}
	return nil
}

// writeJSON writes v as indented JSON, the -o json form of every subcommand.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
