package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/blang/semver/v4"
	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

type serviceAnswer struct {
	File string `json:"file"`
	Name string `json:"name"`
	// What a strict decode refuses (unknown or misspelled keys), which Talos's
	// own non-strict decode silently ignores.
	StrictError string `json:"strictError,omitempty"`
}

// decodeSpec decodes a service spec as machined does (a non-strict
// yaml.NewDecoder(f).Decode(&spec)), validates it with Spec.Validate, and
// separately reports what a strict decode would refuse.
func decodeSpec(text []byte) (services.Spec, string, error) {
	var spec services.Spec

	if err := yaml.NewDecoder(bytes.NewReader(text)).Decode(&spec); err != nil {
		return spec, "", fmt.Errorf("error unmarshalling service spec: %w", err)
	}

	if err := spec.Validate(); err != nil {
		return spec, "", fmt.Errorf("error validating service spec: %w", err)
	}

	var strict services.Spec

	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)

	strictErr := ""
	if err := dec.Decode(&strict); err != nil && !errors.Is(err, io.EOF) {
		strictErr = err.Error()
	}

	return spec, strictErr, nil
}

func serviceSpec(text []byte) answer {
	spec, strictErr, err := decodeSpec(text)
	if err != nil {
		return refused("service-spec", err)
	}

	return answer{"service": serviceAnswer{Name: spec.Name, StrictError: strictErr}}
}

// validateExtension judges an unpacked extension (dir/manifest.yaml and
// dir/rootfs/) as siderolabs/extensions-validator does with machinery:
// extensions.Load, every rootfs/usr/local/etc/containers/*.yaml through the
// service spec decoder and Spec.Validate, then Extension.Validate with the
// constraints (against talosVersion, default this build's machinery tag)
// and the contents.
func validateExtension(dir, talosVersion string) answer {
	if dir == "" {
		return answer{"error": "oracle: validate-extension needs dir", "stage": "request"}
	}

	ext, err := extensions.Load(dir)
	if err != nil {
		return refused("load", err)
	}

	specDir := filepath.Join(ext.RootfsPath(), constants.ExtensionServiceConfigPath)

	found := []serviceAnswer{}

	entries, err := os.ReadDir(specDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return refused("service-spec", err)
	}

	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" {
			continue
		}

		text, rerr := os.ReadFile(filepath.Join(specDir, e.Name()))
		if rerr != nil {
			return refused("service-spec", rerr)
		}

		spec, strictErr, serr := decodeSpec(text)
		if serr != nil {
			return refused("service-spec", fmt.Errorf("%s: %w", e.Name(), serr))
		}

		found = append(found, serviceAnswer{File: e.Name(), Name: spec.Name, StrictError: strictErr})
	}

	sort.Slice(found, func(i, j int) bool { return found[i].File < found[j].File })

	tag := talosVersion
	if tag == "" {
		tag = version.Tag
	}

	v, err := semver.ParseTolerant(tag)
	if err != nil {
		return refused("request", err)
	}

	if err = ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&v)); err != nil {
		return refused("validate", err)
	}

	return answer{
		"manifest": map[string]string{
			"name":          ext.Manifest.Metadata.Name,
			"version":       ext.Manifest.Metadata.Version,
			"compatibility": ext.Manifest.Metadata.Compatibility.Talos.Version,
		},
		"talosVersion": tag,
		"services":     found,
	}
}
