package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sink-io/sink/adapters/auth"
)

// hashTokenMain runs `sink hash-token`: it prints the token_hashes entry of
// the authorization file for a token read from standard input, or with
// --generate, a new random token and its hash. The token is never taken
// from the command line, where process lists would show it.
func hashTokenMain(args []string, stdio IO) int {
	fs := newFlags("sink hash-token")
	generate := fs.Bool("generate", false, "generate a new random token and print it with its hash")
	h := help{name: "hash-token", forms: []string{"[--generate]"}, exits: exitsTool, flags: []*flag.FlagSet{fs},
		summary: `Prints the value to put in token_hashes of the authorization file
(SINK_AUTH_TOKEN_FILE) for the token read from standard input (one line), or,
with --generate, a new random token and its hash.`,
		examples: "  sink hash-token --generate\n  printf '%s' \"$TOKEN\" | sink hash-token\n"}
	if code, done := parseFlags(fs, args, h, stdio); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stdio, h.name, "the token is read from standard input, not from arguments")
	}
	if *generate {
		token, err := auth.GenerateToken()
		if err != nil {
			return fail(stdio, h.name, ExitFailed, "%v", err)
		}
		fmt.Fprintf(stdio.Stdout, "token:      %s\ntoken_hash: %s\n", token, auth.HashToken(token))
		return ExitOK
	}
	if stdio.Stdin == nil {
		return usageError(stdio, h.name, "no token on standard input (or use --generate)")
	}
	line, err := bufio.NewReader(stdio.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fail(stdio, h.name, ExitFailed, "cannot read the token: %v", err)
	}
	token := strings.TrimRight(line, "\r\n")
	if token == "" {
		return usageError(stdio, h.name, "no token on standard input (or use --generate)")
	}
	fmt.Fprintln(stdio.Stdout, auth.HashToken(token))
	return ExitOK
}
