// Command talos-oracle answers, one JSON line per request line on stdin,
// what Talos's own pkg/machinery says about a machine configuration, a set
// of Cluster API Bootstrap Provider Talos (CABPT) patches, an extension or an
// extension service spec. It is built once per machinery version (see
// go.cabpt.mod, go.node.mod and scripts/build-talos-oracle.sh); the
// project's tests compare its answers with the desired-state library's.
//
// Every answer is a JSON object; a refusal carries Talos's own error text in
// "error" (and the step that refused it in "stage"). A panic inside
// machinery is caught and answered with "panic": true.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)

	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			if werr := enc.Encode(handle(line)); werr != nil {
				fmt.Fprintln(os.Stderr, "talos-oracle: writing an answer:", werr)
				os.Exit(1)
			}

			if ferr := out.Flush(); ferr != nil {
				fmt.Fprintln(os.Stderr, "talos-oracle: writing an answer:", ferr)
				os.Exit(1)
			}
		}

		if err == io.EOF {
			return
		}

		if err != nil {
			fmt.Fprintln(os.Stderr, "talos-oracle: reading a request:", err)
			os.Exit(1)
		}
	}
}

// request is every field any operation reads.
type request struct {
	Op string `json:"op"`
	// A machine configuration (one or more YAML documents).
	Config string `json:"config"`
	// CABPT's spec.configPatches, as the API server stores them (JSON).
	ConfigPatches []json.RawMessage `json:"configPatches"`
	// CABPT's spec.strategicPatches.
	StrategicPatches []string `json:"strategicPatches"`
	// A TalosConfig's spec (TalosConfigTemplate: spec.template.spec).
	Spec *templateSpec `json:"spec"`
	// validate-extension: a directory holding manifest.yaml and rootfs/.
	Dir string `json:"dir"`
	// validate-extension: the Talos version the constraints are checked
	// against (default: this build's machinery tag).
	TalosVersion string `json:"talosVersion"`
	// service-spec: an extension service spec file's text.
	ServiceSpec string `json:"serviceSpec"`
}

type answer map[string]any

func refused(stage string, err error) answer {
	return answer{"error": err.Error(), "stage": stage}
}

func handle(line []byte) (a answer) {
	defer func() {
		if p := recover(); p != nil {
			a = answer{"error": fmt.Sprintf("oracle panic: %v", p), "panic": true, "stage": "oracle", "stack": string(debug.Stack())}
		}
	}()

	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return answer{"error": "oracle: the request is not JSON: " + err.Error(), "stage": "request"}
	}

	switch req.Op {
	case "version":
		return versions()
	case "sysctls":
		return sysctlsOf([]byte(req.Config))
	case "patch":
		return patch([]byte(req.Config), req.ConfigPatches, req.StrategicPatches)
	case "template":
		if req.Spec == nil {
			return answer{"error": "oracle: template needs spec", "stage": "request"}
		}

		return template(req.Spec)
	case "load":
		return load([]byte(req.Config))
	case "validate-extension":
		return validateExtension(req.Dir, req.TalosVersion)
	case "service-spec":
		return serviceSpec([]byte(req.ServiceSpec))
	default:
		return answer{"error": fmt.Sprintf("oracle: unknown op %q", req.Op), "stage": "request"}
	}
}

// versions names the modules this build holds, so a test can say what it
// was proven against.
func versions() answer {
	mods := map[string]string{}

	if bi, ok := debug.ReadBuildInfo(); ok {
		mods["go"] = bi.GoVersion

		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}

			switch d.Path {
			case "github.com/siderolabs/talos/pkg/machinery",
				"github.com/evanphx/json-patch",
				"go.yaml.in/yaml/v4",
				"github.com/siderolabs/gen",
				"gopkg.in/yaml.v3":
				mods[d.Path] = v
			}
		}
	}

	return answer{"modules": mods, "machinery": mods["github.com/siderolabs/talos/pkg/machinery"], "sysctlDocumentKinds": sysctlDocumentKinds()}
}
