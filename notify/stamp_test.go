package notify

import "testing"

// A stamped payload splits into its key and its hub's id; anything else,
// including a key that happens to hold the separator, is all key.
func TestUnstamp(t *testing.T) {
	h := NewHub()
	for _, c := range []struct{ payload, key, hub string }{
		{h.Stamp("eu"), "eu", h.id},
		{h.Stamp(""), "", h.id},
		{h.Stamp("a\x1fb"), "a\x1fb", h.id},
		{"eu", "eu", ""},
		{"", "", ""},
		{"eu\x1f0123456789abcdeF", "eu\x1f0123456789abcdeF", ""}, // not lowercase hex
		{"eu\x1f0123456789abcde", "eu\x1f0123456789abcde", ""},   // 15 digits
		{"eu\x1fzzzzzzzzzzzzzzzz", "eu\x1fzzzzzzzzzzzzzzzz", ""},
	} {
		key, hub := unstamp(c.payload)
		if key != c.key || hub != c.hub {
			t.Errorf("unstamp(%q) = %q, %q; want %q, %q", c.payload, key, hub, c.key, c.hub)
		}
	}
	if len(h.id) != 16 || NewHub().id == h.id {
		t.Errorf("hub ids %q: want 16 hex digits, one a hub", h.id)
	}
}
