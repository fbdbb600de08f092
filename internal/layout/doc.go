// Package layout holds the test that keeps the package graph as
// docs/design/architecture.md and each package's doc.go draw it: which of the product's
// packages each one may import. It has no code of its own.
package layout
