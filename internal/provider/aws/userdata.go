package aws

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"fmt"
	"strings"
	"text/template"
)

// UserData is what one instance's cloud-init script says.
type UserData struct {
	Bootstrap Bootstrap
	// JoinToken is the one-time token the agent exchanges, on first
	// contact, for its node's agent token.
	JoinToken string
	// Node is the node id the server gave the launch; the agent registers
	// under it, with its instance id as a label.
	Node string
	// Region is the pool's region, reported by the agent.
	Region string
}

//go:embed userdata.sh.tmpl
var userDataTemplate string

var userDataTmpl = template.Must(template.New("user-data").Funcs(template.FuncMap{"q": shellQuote, "env": envQuote}).Parse(userDataTemplate))

// Render returns the user-data script (a cloud-init shell script) that
// installs the gpufleet binary, checks its digest and starts the agent as a
// systemd unit. The join token is written to a root-only environment file,
// never to the command line.
func (u UserData) Render() (string, error) {
	for name, v := range map[string]string{"join token": u.JoinToken, "node": u.Node, "region": u.Region} {
		if v == "" || strings.ContainsAny(v, "\x00\n\r") {
			return "", fmt.Errorf("rendering user-data: %s must be one non-empty line", name)
		}
	}
	if fe := ValidateBootstrap(u.Bootstrap, "bootstrap", true); len(fe) > 0 {
		return "", fmt.Errorf("rendering user-data: %w", fe.Err())
	}
	var b bytes.Buffer
	if err := userDataTmpl.Execute(&b, u); err != nil {
		return "", fmt.Errorf("rendering user-data: %w", err)
	}
	// EC2 refuses user-data over 16 KiB before base64.
	if b.Len() > 16*1024 {
		return "", fmt.Errorf("rendering user-data: %d bytes exceeds EC2's 16 KiB", b.Len())
	}
	return b.String(), nil
}

// shellQuote quotes s for a POSIX shell: one single-quoted word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

// envQuote single-quotes s for a systemd EnvironmentFile, which has no
// escape for a quote inside single quotes: such values are refused.
func envQuote(s string) (string, error) {
	if strings.ContainsAny(s, "'\\\n\r\x00") {
		return "", fmt.Errorf("%q cannot be written to an environment file: it holds a quote, backslash or line break", s)
	}
	return "'" + s + "'", nil
}

func base64String(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
