package benchscale

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// XY is one point of a series.
type XY struct{ X, Y float64 }

// Series is one line of a plot.
type Series struct {
	Name   string
	Points []XY
}

const (
	plotWidth, plotHeight = 640, 400
	marginLeft, marginTop = 70, 40
	innerWidth            = plotWidth - marginLeft - 150
	innerHeight           = plotHeight - marginTop - 50
)

var seriesColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}

// Plot renders the series as an SVG line chart: x on a log10 axis (every
// x must be positive), y linear from zero.
func Plot(title, xLabel, yLabel string, series []Series) string {
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range series {
		for _, p := range s.Points {
			if p.X > 0 {
				minX, maxX = math.Min(minX, p.X), math.Max(maxX, p.X)
			}
			maxY = math.Max(maxY, p.Y)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="15">%s</text>`+"\n", marginLeft, html.EscapeString(title))
	if math.IsInf(minX, 1) {
		b.WriteString(`<text x="70" y="200">no data</text></svg>` + "\n")
		return b.String()
	}
	lo, hi := math.Floor(math.Log10(minX)), math.Ceil(math.Log10(maxX))
	if hi == lo {
		hi = lo + 1
	}
	top := niceCeil(maxY)
	px := func(x float64) float64 { return marginLeft + (math.Log10(x)-lo)/(hi-lo)*innerWidth }
	py := func(y float64) float64 { return marginTop + innerHeight - y/top*innerHeight }

	// Axes, decade ticks on x, five ticks on y.
	fmt.Fprintf(&b, `<g stroke="#888"><line x1="%d" y1="%d" x2="%d" y2="%d"/><line x1="%d" y1="%d" x2="%d" y2="%d"/></g>`+"\n",
		marginLeft, marginTop+innerHeight, marginLeft+innerWidth, marginTop+innerHeight, marginLeft, marginTop, marginLeft, marginTop+innerHeight)
	for d := lo; d <= hi; d++ {
		x := px(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n",
			x, marginTop, x, marginTop+innerHeight, x, marginTop+innerHeight+16, math.Pow(10, d))
	}
	for i := 0; i <= 5; i++ {
		v := top * float64(i) / 5
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			marginLeft, y, marginLeft+innerWidth, y, marginLeft-6, y+4, round3(v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", marginLeft+innerWidth/2, plotHeight-12, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", marginTop+innerHeight/2, html.EscapeString(yLabel))

	for i, s := range series {
		color := seriesColors[i%len(seriesColors)]
		var pts []string
		for _, p := range s.Points {
			if p.X > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		for _, pt := range pts {
			xy := strings.SplitN(pt, ",", 2)
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
		ly := marginTop + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			marginLeft+innerWidth+15, ly, marginLeft+innerWidth+35, ly, color, marginLeft+innerWidth+40, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
