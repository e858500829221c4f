package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/config"
	cfgdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// sysctlKind is the dedicated sysctl document of Talos ≥ 1.14 (its
// `params` map); a build whose machinery does not register it refuses it
// like any unknown kind.
const sysctlKind = "SysctlConfig"

// sysctlDocumentKinds lists the document kinds this build's machinery
// registers that set sysctls (none before Talos 1.14).
func sysctlDocumentKinds() []string {
	kinds := []string{}

	if _, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: " + sysctlKind + "\nparams: {}\n")); err == nil {
		kinds = append(kinds, sysctlKind)
	}

	return kinds
}

type sourced struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

type docID struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name,omitempty"`
}

func identify(d cfgdoc.Document) docID {
	id := docID{APIVersion: d.APIVersion(), Kind: d.Kind()}

	if named, ok := d.(cfgdoc.NamedDocument); ok {
		id.Name = named.Name()
	}

	return id
}

// sysctls are the sysctls the loaded configuration sets, in the order the
// node merges them: machine.sysctls, then every dedicated sysctl document
// (a later one winning key by key).
func sysctls(cfg config.Provider) (map[string]sourced, error) {
	out := map[string]sourced{}

	if v1 := cfg.RawV1Alpha1(); v1 != nil && v1.MachineConfig != nil {
		for k, v := range v1.MachineConfig.MachineSysctls {
			out[k] = sourced{Value: v, Source: "machine.sysctls"}
		}
	}

	for _, d := range cfg.Documents() {
		if d.Kind() != sysctlKind {
			continue
		}

		raw, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}

		var doc struct {
			Params map[string]string `yaml:"params"`
		}

		if err = yaml.Unmarshal(raw, &doc); err != nil {
			return nil, err
		}

		for k, v := range doc.Params {
			out[k] = sourced{Value: v, Source: sysctlKind}
		}
	}

	return out, nil
}

// loaded is the answer for a configuration the loader took.
func loaded(cfg config.Provider) answer {
	s, err := sysctls(cfg)
	if err != nil {
		return refused("sysctls", err)
	}

	docs := []docID{}
	for _, d := range cfg.Documents() {
		docs = append(docs, identify(d))
	}

	return answer{"sysctls": s, "documents": docs}
}

// sysctlsOf loads a configuration as the node does (configloader) and
// answers the sysctls it sets.
func sysctlsOf(text []byte) answer {
	cfg, err := configloader.NewFromBytes(text)
	if err != nil {
		return refused("load", err)
	}

	return loaded(cfg)
}

// cabptConfigPatch is one item of CABPT's spec.configPatches as its API type
// holds it (api/v1alpha3 ConfigPatches: op, path, value; there is no
// `from`, so the API server prunes one and CABPT never sees it).
type cabptConfigPatch struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// asCABPTStores re-encodes configPatches the way CABPT marshals its typed
// list: only op, path and value survive, an absent value is null.
func asCABPTStores(items []json.RawMessage) ([]cabptConfigPatch, error) {
	out := make([]cabptConfigPatch, 0, len(items))

	for _, raw := range items {
		var p cabptConfigPatch
		if err := json.Unmarshal(raw, &p); err != nil {
			// The API server would have refused the object.
			return nil, fmt.Errorf("the API server refuses this configPatches item: %w", err)
		}

		if len(p.Value) == 0 {
			p.Value = json.RawMessage("null")
		}

		out = append(out, p)
	}

	return out, nil
}

// patch applies CABPT's patch steps to a base configuration (the bytes of
// BootstrapData after the base was rendered), in CABPT's order
// (controllers/talosconfig_controller.go reconcileGenerate): first
// configPatches as one RFC 6902 patch through configpatcher.JSON6902, then
// every strategicPatches string through configpatcher.LoadPatch and
// configpatcher.Apply, encoded without comments. The result is then loaded
// by this build's configloader, as the node would.
func patch(base []byte, configPatches []json.RawMessage, strategicPatches []string) answer {
	data := base

	if len(configPatches) > 0 {
		typed, err := asCABPTStores(configPatches)
		if err != nil {
			return refused("configPatches", err)
		}

		marshalled, err := json.Marshal(typed)
		if err != nil {
			return refused("configPatches", fmt.Errorf("failure marshalling config patches: %s", err))
		}

		p, err := jsonpatch.DecodePatch(marshalled)
		if err != nil {
			return refused("configPatches", fmt.Errorf("failure decoding config patches from talosconfig to rfc6902 patch: %s", err))
		}

		data, err = configpatcher.JSON6902(data, p)
		if err != nil {
			return refused("configPatches", err)
		}
	}

	if len(strategicPatches) > 0 {
		patches := make([]configpatcher.Patch, 0, len(strategicPatches))

		for _, sp := range strategicPatches {
			p, err := configpatcher.LoadPatch([]byte(sp))
			if err != nil {
				return refused("strategicPatches", fmt.Errorf("failure loading StrategicPatch: %w", err))
			}

			patches = append(patches, p)
		}

		out, err := configpatcher.Apply(configpatcher.WithBytes(data), patches)
		if err != nil {
			return refused("strategicPatches", fmt.Errorf("failure applying StrategicPatches: %w", err))
		}

		outCfg, err := out.Config()
		if err != nil {
			return refused("strategicPatches", fmt.Errorf("failure converting result to bytes: %w", err))
		}

		s, err := outCfg.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			return refused("strategicPatches", fmt.Errorf("failure converting config to string: %w", err))
		}

		data = []byte(s)
	}

	a := sysctlsOf(data)
	a["config"] = string(data)

	return a
}

// templateSpec is the part of a TalosConfig spec that renders the config.
type templateSpec struct {
	GenerateType     string            `json:"generateType"`
	TalosVersion     string            `json:"talosVersion"`
	Data             string            `json:"data"`
	ConfigPatches    []json.RawMessage `json:"configPatches"`
	StrategicPatches []string          `json:"strategicPatches"`
}

var (
	bundlesMu sync.Mutex
	bundles   = map[string]*secrets.Bundle{}
)

// bundleFor is one secrets bundle per version contract for the process's
// life (CABPT keeps one per cluster; the secrets set no sysctl).
func bundleFor(contract *config.VersionContract) (*secrets.Bundle, error) {
	bundlesMu.Lock()
	defer bundlesMu.Unlock()

	key := "current"
	if contract != nil {
		key = contract.String()
	}
	if b, ok := bundles[key]; ok {
		return b, nil
	}

	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		return nil, err
	}

	bundles[key] = b

	return b, nil
}

// template renders a TalosConfig as CABPT's reconcileGenerate does: the
// base is `data` (loaded and re-encoded) for generateType none, else a
// config generated for the machine type and the talosVersion contract;
// then the patch steps of patch. The Cluster's endpoint, name and network
// and the hostname source are CABPT inputs outside the spec; fixed values
// stand in (they set no sysctl).
func template(spec *templateSpec) answer {
	var base string

	machineType, _ := machine.ParseType(spec.GenerateType) //nolint:errcheck // as CABPT: handled below

	switch {
	case spec.GenerateType == "none":
		if spec.Data == "" {
			return refused("data", errors.New("failed to specify config data with none generate type"))
		}

		userConfig, err := configloader.NewFromBytes([]byte(spec.Data))
		if err != nil {
			return refused("data", err)
		}

		base, err = userConfig.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			return refused("data", err)
		}
	case machineType != machine.TypeUnknown:
		contract := config.TalosVersionCurrent

		if spec.TalosVersion != "" {
			var err error

			contract, err = config.ParseContractFromVersion(spec.TalosVersion)
			if err != nil {
				return refused("generate", fmt.Errorf("invalid talos-version: %w", err))
			}
		}

		bundle, err := bundleFor(contract)
		if err != nil {
			return refused("generate", err)
		}

		opts := []generate.Option{
			generate.WithDNSDomain(constants.DefaultDNSDomain),
			generate.WithVersionContract(contract),
			generate.WithSecretsBundle(bundle),
		}

		// As CABPT: the current contract is nil.
		if contract != nil && contract.Major < 1 && contract.Minor < 14 {
			opts = append(opts, generate.WithClusterDiscovery(false))
		}

		input, err := generate.NewInput("oracle", "https://192.0.2.1:6443", constants.DefaultKubernetesVersion, opts...)
		if err != nil {
			return refused("generate", err)
		}

		data, err := input.Config(machineType)
		if err != nil {
			return refused("generate", err)
		}

		base, err = data.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			return refused("generate", err)
		}
	default:
		return refused("generate", fmt.Errorf("unknown generate type specified: %q", spec.GenerateType))
	}

	a := patch([]byte(base), spec.ConfigPatches, spec.StrategicPatches)
	a["base"] = base

	return a
}

// runtimeMode is the mode documents are validated in: a metal node that is
// installed (Talos validates an applied config against the running mode).
type runtimeMode struct{}

func (runtimeMode) String() string        { return "metal" }
func (runtimeMode) RequiresInstall() bool { return true }
func (runtimeMode) InContainer() bool     { return false }

type documentAnswer struct {
	docID

	Environment []string `json:"environment,omitempty"`
	ConfigFiles []string `json:"configFiles,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
}

// load loads documents with configloader, then validates every document
// that validates itself (ExtensionServiceConfig, …) as Talos does when the
// config is applied. The v1alpha1 document's own validation needs a whole
// machine config and is left out.
func load(text []byte) answer {
	cfg, err := configloader.NewFromBytes(text)
	if err != nil {
		return refused("load", err)
	}

	docs := []documentAnswer{}

	for _, d := range cfg.Documents() {
		da := documentAnswer{docID: identify(d)}

		if esc, ok := d.(cfgdoc.ExtensionServiceConfig); ok {
			da.Environment = esc.Environment()

			for _, f := range esc.ConfigFiles() {
				da.ConfigFiles = append(da.ConfigFiles, f.MountPath())
			}
		}

		if v, ok := d.(cfgdoc.Validator); ok && d.Kind() != "v1alpha1" && d.Kind() != "" {
			warnings, verr := v.Validate(runtimeMode{})
			if verr != nil {
				id := identify(d)

				return refused("validate", fmt.Errorf("%s %s: %w", id.Kind, id.Name, verr))
			}

			da.Warnings = warnings
		}

		docs = append(docs, da)
	}

	s, err := sysctls(cfg)
	if err != nil {
		return refused("sysctls", err)
	}

	return answer{"documents": docs, "sysctls": s}
}
