package application

import (
	"fmt"

	"github.com/sink-io/sink/ports"
)

// profileOrigin says where a merge profile comes from, for start-up
// messages: its own account (ports.ProfileOrigin, such as a file and line)
// or, for profiles written in Go, its type.
func profileOrigin(p ports.MergeProfile) string {
	if o, ok := p.(ports.ProfileOrigin); ok {
		return o.Origin()
	}
	return fmt.Sprintf("the Go type %T", p)
}
