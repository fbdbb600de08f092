// Package doccheck checks the project's Markdown: every relative link names a file that
// exists and every anchor a heading of its page (GitHub's anchor rules), and every alert
// runbook_url under deploy/ names a page of docs/runbooks. Its test runs the checks on
// the repository. It is for tests only and imports nothing of the product.
package doccheck
