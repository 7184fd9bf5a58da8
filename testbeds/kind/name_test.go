package kind

import (
	"errors"
	"testing"
)

// TestNewRefusesBadNames: the name becomes <cache>/kind/<name>/, so New
// refuses anything but a DNS-1123 label before it looks for Docker or
// builds anything.
func TestNewRefusesBadNames(t *testing.T) {
	for _, name := range []string{"../..", "/abs", "a/b", "Upper"} {
		if _, err := New(t.Context(), Options{Name: name}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("New(Name: %q) = %v, want ErrInvalidName", name, err)
		}
	}
}
