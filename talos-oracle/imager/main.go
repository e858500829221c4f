// Command talos-oracle-imager answers, one JSON line per request line on
// stdin, what Talos's own imager profile code
// (github.com/siderolabs/talos/pkg/imager/profile, Talos's main module) says
// about an imager profile: the steps `imager -` takes before it pulls or
// builds anything. It is its own module because the profile package lives in
// Talos's main module, whose dependency graph (AWS and Azure signers,
// go-containerregistry, a newer grpc) must not move the versions the
// machinery oracles (../go.mod, ../go.cabpt.mod) pin. Built by
// scripts/build-talos-oracle.sh; used by tests/talos_oracle.rs; nothing of it
// ships.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/imager/profile"
	"github.com/siderolabs/talos/pkg/machinery/config/merge"
	"github.com/siderolabs/talos/pkg/machinery/version"
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
				fmt.Fprintln(os.Stderr, "talos-oracle-imager: writing an answer:", werr)
				os.Exit(1)
			}

			if ferr := out.Flush(); ferr != nil {
				fmt.Fprintln(os.Stderr, "talos-oracle-imager: writing an answer:", ferr)
				os.Exit(1)
			}
		}

		if err == io.EOF {
			return
		}

		if err != nil {
			fmt.Fprintln(os.Stderr, "talos-oracle-imager: reading a request:", err)
			os.Exit(1)
		}
	}
}

type request struct {
	Op string `json:"op"`
	// imager-profile: the profile's YAML, as `imager -` reads it on stdin.
	Profile string `json:"profile"`
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
	case "imager-profile":
		return imagerProfile([]byte(req.Profile))
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
			switch d.Path {
			case "github.com/siderolabs/talos",
				"github.com/siderolabs/talos/pkg/machinery",
				"github.com/google/go-containerregistry",
				"go.yaml.in/yaml/v4":
				mods[d.Path] = d.Version
			}
		}
	}

	return answer{"modules": mods, "talos": mods["github.com/siderolabs/talos"]}
}

type reference struct {
	// Where in the profile: input.baseInstaller, input.systemExtensions[0], …
	Field    string `json:"field"`
	ImageRef string `json:"imageRef"`
	// The digest the reference pins ("" for a tag).
	Digest string `json:"digest,omitempty"`
	// What go-containerregistry's parser refuses: crane.Pull parses every
	// reference this way when the imager pulls it.
	Error string `json:"error,omitempty"`
}

// imagerProfile takes a profile through the steps of `imager -` in Talos's
// cmd/installer/cmd/imager/root.go and pkg/imager/imager.go (handleProf),
// in their order: the non-strict YAML decode of stdin, the base profile
// merge, the defaults, Validate. An overlay's own base profiles come from
// pulling its image (handleOverlay), which the oracle does not do: a
// baseProfileName resolves against profile.Default only.
func imagerProfile(text []byte) answer {
	var prof profile.Profile

	// root.go: yaml.NewDecoder(os.Stdin).Decode(&prof), not strict.
	if err := yaml.NewDecoder(bytes.NewReader(text)).Decode(&prof); err != nil {
		return refused("decode", err)
	}

	// Keys the imager silently ignores (a misspelt systemExtensions drops
	// every extension without a word), reported beside the answer.
	strictError := ""

	var strict profile.Profile

	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)

	if err := dec.Decode(&strict); err != nil {
		strictError = err.Error()
	}

	// imager.go handleProf.
	if prof.BaseProfileName != "" {
		base, ok := profile.Default[prof.BaseProfileName]
		if !ok {
			return refused("profile", fmt.Errorf("unknown base profile: %s", prof.BaseProfileName))
		}

		base = base.DeepCopy()

		if err := merge.Merge(&base, &prof); err != nil {
			return refused("profile", err)
		}

		prof = base
		prof.BaseProfileName = ""
	}

	if prof.Name == "" {
		prof.Name = version.Name
	}

	if prof.Version == "" {
		prof.Version = version.Tag
	}

	prof.Input.FillDefaults(prof.Arch, prof.Version, prof.SecureBootEnabled())
	prof.Output.FillDefaults(prof.Arch, prof.Version, prof.SecureBootEnabled())

	if err := prof.Validate(); err != nil {
		return refused("validate", fmt.Errorf("profile is invalid: %w", err))
	}

	var dumped bytes.Buffer
	if err := prof.Dump(&dumped); err != nil {
		return refused("dump", err)
	}

	var finalized map[string]any
	if err := yaml.Unmarshal(dumped.Bytes(), &finalized); err != nil {
		return refused("dump", err)
	}

	return answer{
		"profile":     finalized,
		"outputPath":  prof.OutputPath(),
		"references":  references(&prof),
		"strictError": strictError,
	}
}

func references(prof *profile.Profile) []reference {
	var refs []reference

	add := func(field string, c profile.ContainerAsset) {
		// An OCI path or tarball replaces the reference (input.go Pull).
		if c.ImageRef == "" || c.OCIPath != "" || c.TarballPath != "" {
			return
		}

		r := reference{Field: field, ImageRef: c.ImageRef}

		// crane.Pull's parse: name.ParseReference with no options.
		parsed, err := name.ParseReference(c.ImageRef)
		if err != nil {
			r.Error = err.Error()
		} else if d, ok := parsed.(name.Digest); ok {
			r.Digest = d.DigestStr()
		}

		refs = append(refs, r)
	}

	add("input.baseInstaller", prof.Input.BaseInstaller)
	add("input.imageCache", prof.Input.ImageCache)
	add("input.overlayInstaller", prof.Input.OverlayInstaller)

	for i, ext := range prof.Input.SystemExtensions {
		add(fmt.Sprintf("input.systemExtensions[%d]", i), ext)
	}

	if prof.Overlay != nil {
		add("overlay.image", prof.Overlay.Image)
	}

	return refs
}
