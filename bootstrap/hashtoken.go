package bootstrap

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sink-io/sink/adapters/auth"
)

// HashTokenMain implements `sink hash-token`: it prints the token_hashes
// entry of the authorization file for a token read from standard input, or
// with --generate, a new random token and its hash. The token is never
// taken from the command line, where process lists would show it.
func HashTokenMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sink hash-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	generate := fs.Bool("generate", false, "generate a new random token and print it with its hash")
	fs.Usage = func() {
		io.WriteString(stdout, `Usage: sink hash-token [--generate]

Prints the value to put in token_hashes of the authorization file
(SINK_AUTH_TOKEN_FILE) for the token read from standard input (one line), or,
with --generate, a new random token and its hash.

Examples:
  sink hash-token --generate
  printf '%s' "$TOKEN" | sink hash-token

Flags:
`)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sink hash-token: the token is read from standard input, not from arguments")
		return 2
	}
	if *generate {
		token, err := auth.GenerateToken()
		if err != nil {
			fmt.Fprintln(stderr, "sink hash-token:", err)
			return 1
		}
		fmt.Fprintf(stdout, "token:      %s\ntoken_hash: %s\n", token, auth.HashToken(token))
		return 0
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "sink hash-token: cannot read the token:", err)
		return 1
	}
	token := strings.TrimRight(line, "\r\n")
	if token == "" {
		fmt.Fprintln(stderr, "sink hash-token: no token on standard input (or use --generate)")
		return 2
	}
	fmt.Fprintln(stdout, auth.HashToken(token))
	return 0
}
