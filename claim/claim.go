// Package claim names the claim forms a subscription picks from:
// lease.Form (the default; SQLite, Postgres and MariaDB/MySQL), rowlock.Form
// (Postgres and MariaDB/MySQL) and advisory.Form (Postgres and MariaDB), in
// the packages below this one.
//
//	sub, err := inbox.Subscribe(b, q, handle, inbox.Form(rowlock.Form))
//
// Each form keeps every row in at most one claim at a time; the conformance
// suites in this directory (suite_test.go, settle_suite_test.go) hold all
// three to that, and to the same settlement, on every database they serve.
//
// The contract a form implements is internal (internal/claim): it is
// written against the library's own SQL and table types, which are not a
// stable API, so a Form can be held and passed but not implemented outside
// this module.
package claim

import "github.com/sqlinbox/sqlinbox/internal/claim"

// Form is a claim form: lease.Form, rowlock.Form or advisory.Form.
type Form = claim.Form
