package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// chartMinutes is how many minutes a chart shows, the last one the minute
// now in progress.
const chartMinutes = 60

// chart draws handlings a minute over the last hour as an SVG bar chart:
// acked in green, every other outcome stacked above in red. Only numbers
// computed here reach the markup, so it is safe to mark as HTML.
func chart(mins []inbox.Minute, now time.Time, w, h int) template.HTML {
	end := now.Truncate(time.Minute)
	start := end.Add(-(chartMinutes - 1) * time.Minute)
	var ok, bad [chartMinutes]int64
	for _, m := range mins {
		i := int(m.At.Sub(start) / time.Minute)
		if i < 0 || i >= chartMinutes {
			continue
		}
		if m.Outcome == inbox.Acked {
			ok[i] += m.Handled
		} else {
			bad[i] += m.Handled
		}
	}
	var top, total int64
	for i := range ok {
		top = max(top, ok[i]+bad[i])
		total += ok[i] + bad[i]
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%d handled in the last hour, at most %d in a minute">`, w, h, w, h, total, top)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fafbfc" stroke="#dde1e8"/>`, w, h)
	if top > 0 {
		bar := float64(w) / chartMinutes
		scale := float64(h-2) / float64(top)
		for i := range ok {
			x := float64(i) * bar
			hOK, hBad := float64(ok[i])*scale, float64(bad[i])*scale
			if hOK > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2f7d4f"/>`, x, float64(h-1)-hOK, bar*0.85, hOK)
			}
			if hBad > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#b3261e"/>`, x, float64(h-1)-hOK-hBad, bar*0.85, hBad)
			}
		}
	}
	fmt.Fprintf(&b, `<title>%d handled in the last hour; peak %d a minute</title></svg>`, total, top)
	return template.HTML(b.String())
}
