// Package layers holds only a test: the house's floors, from the bottom
// api/ and internal/, then testbeds/, then operator/, node-agent/,
// conformance/, dashboards/ and charts/ on top. An import never runs from
// a lower floor to a higher one (docs/development/layout.md).
package layers
