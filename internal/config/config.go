// Package config holds the one error every constructor and option of the
// module wraps when it refuses a value, so that callers test for one thing
// whichever package refused it: inbox.ErrInvalid, lock.ErrInvalid and
// schedule.ErrInvalid are this value.
package config

import "errors"

// ErrInvalid marks input refused before anything was created or asked of a
// store: an option's value out of its bound, a bad name or token.
var ErrInvalid = errors.New("invalid argument")
