package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
)

// forms are the claim forms by the names the commands take.
var forms = map[string]claim.Form{
	lease.Form.Name():    lease.Form,
	rowlock.Form.Name():  rowlock.Form,
	advisory.Form.Name(): advisory.Form,
}

// formByName returns the claim form called name, or an error that lists them.
func formByName(name string) (claim.Form, error) {
	if f, ok := forms[name]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("unknown claim form %q: use %s", name, formNames(", "))
}

// formNames lists the forms' names, sorted, joined by sep.
func formNames(sep string) string {
	names := make([]string, 0, len(forms))
	for n := range forms {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, sep)
}
