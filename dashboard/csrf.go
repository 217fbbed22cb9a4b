package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
)

// csrfCookie holds the token every form of the page repeats: a POST whose
// form field does not match its cookie did not come from a page this
// dashboard served (a cross-site form cannot read the cookie).
const csrfCookie = "sqlinbox_csrf"

// token returns the request's CSRF token, setting a new cookie when it has
// none.
func token(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	t := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return t
}

// checkCSRF reports why a POST is refused, or "" when its token matches its
// cookie and it comes from this origin.
func checkCSRF(r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 64 {
		return "no CSRF cookie: reload the page and try again"
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		return "the CSRF token does not match: reload the page and try again"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return "cross-origin request refused"
		}
	}
	return ""
}
