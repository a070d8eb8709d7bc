package main

import (
	"fmt"
	"html"
	"strings"
)

// svg builds an SVG document; coordinates are in pixels.
type svg struct{ b strings.Builder }

func newSVG(w, h int, title string) *svg {
	s := &svg{}
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	s.f("<title>%s</title>\n", html.EscapeString(title))
	s.f(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	return s
}

func (s *svg) f(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, width float64, dash string) {
	d := ""
	if dash != "" {
		d = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
	}
	s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x1, y1, x2, y2, stroke, width, d)
}

func (s *svg) rect(x, y, w, h float64, fill, stroke string) {
	s.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="%s"/>`+"\n", x, y, w, h, fill, stroke)
}

func (s *svg) circle(x, y, r float64, fill, stroke string) {
	s.f(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="%s"/>`+"\n", x, y, r, fill, stroke)
}

// text writes t at (x, y); anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, style, t string) {
	s.f(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, style, html.EscapeString(t))
}

func (s *svg) polyline(points []float64, stroke string, width float64) {
	var p strings.Builder
	for i := 0; i+1 < len(points); i += 2 {
		fmt.Fprintf(&p, "%.1f,%.1f ", points[i], points[i+1])
	}
	s.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f"/>`+"\n", strings.TrimSpace(p.String()), stroke, width)
}

func (s *svg) String() string { return s.b.String() + "</svg>\n" }
