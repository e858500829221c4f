impl serde::Serialize for AgentInfo {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.AgentInfo", len)?;
        if true {
            struct_ser.serialize_field("version", &self.version)?;
        }
        if let Some(v) = self.started_at.as_ref() {
            struct_ser.serialize_field("startedAt", v)?;
        }
        if true {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("observations", ToString::to_string(&self.observations).as_str())?;
        }
        if true {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("sandboxProbes", ToString::to_string(&self.sandbox_probes).as_str())?;
        }
        if true {
            struct_ser.serialize_field("incomplete", &self.incomplete)?;
        }
        if true {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("canaries", ToString::to_string(&self.canaries).as_str())?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for AgentInfo {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "version",
            "started_at",
            "startedAt",
            "observations",
            "sandbox_probes",
            "sandboxProbes",
            "incomplete",
            "canaries",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Version,
            StartedAt,
            Observations,
            SandboxProbes,
            Incomplete,
            Canaries,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "version" => Ok(GeneratedField::Version),
                            "startedAt" | "started_at" => Ok(GeneratedField::StartedAt),
                            "observations" => Ok(GeneratedField::Observations),
                            "sandboxProbes" | "sandbox_probes" => Ok(GeneratedField::SandboxProbes),
                            "incomplete" => Ok(GeneratedField::Incomplete),
                            "canaries" => Ok(GeneratedField::Canaries),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = AgentInfo;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.AgentInfo")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<AgentInfo, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut version__ = None;
                let mut started_at__ = None;
                let mut observations__ = None;
                let mut sandbox_probes__ = None;
                let mut incomplete__ = None;
                let mut canaries__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Version => {
                            if version__.is_some() {
                                return Err(serde::de::Error::duplicate_field("version"));
                            }
                            version__ = Some(map_.next_value()?);
                        }
                        GeneratedField::StartedAt => {
                            if started_at__.is_some() {
                                return Err(serde::de::Error::duplicate_field("startedAt"));
                            }
                            started_at__ = map_.next_value()?;
                        }
                        GeneratedField::Observations => {
                            if observations__.is_some() {
                                return Err(serde::de::Error::duplicate_field("observations"));
                            }
                            observations__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::SandboxProbes => {
                            if sandbox_probes__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sandboxProbes"));
                            }
                            sandbox_probes__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Incomplete => {
                            if incomplete__.is_some() {
                                return Err(serde::de::Error::duplicate_field("incomplete"));
                            }
                            incomplete__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Canaries => {
                            if canaries__.is_some() {
                                return Err(serde::de::Error::duplicate_field("canaries"));
                            }
                            canaries__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                    }
                }
                Ok(AgentInfo {
                    version: version__.unwrap_or_default(),
                    started_at: started_at__,
                    observations: observations__.unwrap_or_default(),
                    sandbox_probes: sandbox_probes__.unwrap_or_default(),
                    incomplete: incomplete__.unwrap_or_default(),
                    canaries: canaries__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.AgentInfo", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Binary {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Binary", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if true {
            struct_ser.serialize_field("path", &self.path)?;
        }
        if true {
            struct_ser.serialize_field("present", &self.present)?;
        }
        if true {
            struct_ser.serialize_field("regularFile", &self.regular_file)?;
        }
        if true {
            struct_ser.serialize_field("executable", &self.executable)?;
        }
        if true {
            struct_ser.serialize_field("worldExecutable", &self.world_executable)?;
        }
        if true {
            struct_ser.serialize_field("version", &self.version)?;
        }
        if true {
            struct_ser.serialize_field("versionRaw", &self.version_raw)?;
        }
        if true {
            struct_ser.serialize_field("error", &self.error)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Binary {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "path",
            "present",
            "regular_file",
            "regularFile",
            "executable",
            "world_executable",
            "worldExecutable",
            "version",
            "version_raw",
            "versionRaw",
            "error",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Path,
            Present,
            RegularFile,
            Executable,
            WorldExecutable,
            Version,
            VersionRaw,
            Error,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "path" => Ok(GeneratedField::Path),
                            "present" => Ok(GeneratedField::Present),
                            "regularFile" | "regular_file" => Ok(GeneratedField::RegularFile),
                            "executable" => Ok(GeneratedField::Executable),
                            "worldExecutable" | "world_executable" => Ok(GeneratedField::WorldExecutable),
                            "version" => Ok(GeneratedField::Version),
                            "versionRaw" | "version_raw" => Ok(GeneratedField::VersionRaw),
                            "error" => Ok(GeneratedField::Error),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Binary;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Binary")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Binary, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut path__ = None;
                let mut present__ = None;
                let mut regular_file__ = None;
                let mut executable__ = None;
                let mut world_executable__ = None;
                let mut version__ = None;
                let mut version_raw__ = None;
                let mut error__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Path => {
                            if path__.is_some() {
                                return Err(serde::de::Error::duplicate_field("path"));
                            }
                            path__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Present => {
                            if present__.is_some() {
                                return Err(serde::de::Error::duplicate_field("present"));
                            }
                            present__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RegularFile => {
                            if regular_file__.is_some() {
                                return Err(serde::de::Error::duplicate_field("regularFile"));
                            }
                            regular_file__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Executable => {
                            if executable__.is_some() {
                                return Err(serde::de::Error::duplicate_field("executable"));
                            }
                            executable__ = Some(map_.next_value()?);
                        }
                        GeneratedField::WorldExecutable => {
                            if world_executable__.is_some() {
                                return Err(serde::de::Error::duplicate_field("worldExecutable"));
                            }
                            world_executable__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Version => {
                            if version__.is_some() {
                                return Err(serde::de::Error::duplicate_field("version"));
                            }
                            version__ = Some(map_.next_value()?);
                        }
                        GeneratedField::VersionRaw => {
                            if version_raw__.is_some() {
                                return Err(serde::de::Error::duplicate_field("versionRaw"));
                            }
                            version_raw__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Binary {
                    name: name__.unwrap_or_default(),
                    path: path__.unwrap_or_default(),
                    present: present__.unwrap_or_default(),
                    regular_file: regular_file__.unwrap_or_default(),
                    executable: executable__.unwrap_or_default(),
                    world_executable: world_executable__.unwrap_or_default(),
                    version: version__.unwrap_or_default(),
                    version_raw: version_raw__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Binary", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Canary {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Canary", len)?;
        if true {
            struct_ser.serialize_field("handler", &self.handler)?;
        }
        if let Some(v) = self.result.as_ref() {
            struct_ser.serialize_field("result", v)?;
        }
        if true {
            struct_ser.serialize_field("image", &self.image)?;
        }
        if true {
            struct_ser.serialize_field("sandboxId", &self.sandbox_id)?;
        }
        if true {
            struct_ser.serialize_field("runtimeError", &self.runtime_error)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Canary {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "handler",
            "result",
            "image",
            "sandbox_id",
            "sandboxId",
            "runtime_error",
            "runtimeError",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Handler,
            Result,
            Image,
            SandboxId,
            RuntimeError,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "handler" => Ok(GeneratedField::Handler),
                            "result" => Ok(GeneratedField::Result),
                            "image" => Ok(GeneratedField::Image),
                            "sandboxId" | "sandbox_id" => Ok(GeneratedField::SandboxId),
                            "runtimeError" | "runtime_error" => Ok(GeneratedField::RuntimeError),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Canary;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Canary")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Canary, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut handler__ = None;
                let mut result__ = None;
                let mut image__ = None;
                let mut sandbox_id__ = None;
                let mut runtime_error__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Handler => {
                            if handler__.is_some() {
                                return Err(serde::de::Error::duplicate_field("handler"));
                            }
                            handler__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Result => {
                            if result__.is_some() {
                                return Err(serde::de::Error::duplicate_field("result"));
                            }
                            result__ = map_.next_value()?;
                        }
                        GeneratedField::Image => {
                            if image__.is_some() {
                                return Err(serde::de::Error::duplicate_field("image"));
                            }
                            image__ = Some(map_.next_value()?);
                        }
                        GeneratedField::SandboxId => {
                            if sandbox_id__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sandboxId"));
                            }
                            sandbox_id__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RuntimeError => {
                            if runtime_error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeError"));
                            }
                            runtime_error__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Canary {
                    handler: handler__.unwrap_or_default(),
                    result: result__,
                    image: image__.unwrap_or_default(),
                    sandbox_id: sandbox_id__.unwrap_or_default(),
                    runtime_error: runtime_error__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Canary", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for CheckRequest {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.CheckRequest", len)?;
        if let Some(v) = self.desired.as_ref() {
            struct_ser.serialize_field("desired", v)?;
        }
        if true {
            struct_ser.serialize_field("refresh", &self.refresh)?;
        }
        if true {
            struct_ser.serialize_field("ifChangedFrom", &self.if_changed_from)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for CheckRequest {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "desired",
            "refresh",
            "if_changed_from",
            "ifChangedFrom",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Desired,
            Refresh,
            IfChangedFrom,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "desired" => Ok(GeneratedField::Desired),
                            "refresh" => Ok(GeneratedField::Refresh),
                            "ifChangedFrom" | "if_changed_from" => Ok(GeneratedField::IfChangedFrom),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = CheckRequest;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.CheckRequest")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<CheckRequest, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut desired__ = None;
                let mut refresh__ = None;
                let mut if_changed_from__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Desired => {
                            if desired__.is_some() {
                                return Err(serde::de::Error::duplicate_field("desired"));
                            }
                            desired__ = map_.next_value()?;
                        }
                        GeneratedField::Refresh => {
                            if refresh__.is_some() {
                                return Err(serde::de::Error::duplicate_field("refresh"));
                            }
                            refresh__ = Some(map_.next_value()?);
                        }
                        GeneratedField::IfChangedFrom => {
                            if if_changed_from__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ifChangedFrom"));
                            }
                            if_changed_from__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(CheckRequest {
                    desired: desired__,
                    refresh: refresh__.unwrap_or_default(),
                    if_changed_from: if_changed_from__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.CheckRequest", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for CheckResponse {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.CheckResponse", len)?;
        if let Some(v) = self.verdict.as_ref() {
            struct_ser.serialize_field("verdict", v)?;
        }
        if let Some(v) = self.report.as_ref() {
            struct_ser.serialize_field("report", v)?;
        }
        if true {
            struct_ser.serialize_field("unchanged", &self.unchanged)?;
        }
        if true {
            struct_ser.serialize_field("token", &self.token)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for CheckResponse {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "verdict",
            "report",
            "unchanged",
            "token",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Verdict,
            Report,
            Unchanged,
            Token,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "verdict" => Ok(GeneratedField::Verdict),
                            "report" => Ok(GeneratedField::Report),
                            "unchanged" => Ok(GeneratedField::Unchanged),
                            "token" => Ok(GeneratedField::Token),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = CheckResponse;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.CheckResponse")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<CheckResponse, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut verdict__ = None;
                let mut report__ = None;
                let mut unchanged__ = None;
                let mut token__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Verdict => {
                            if verdict__.is_some() {
                                return Err(serde::de::Error::duplicate_field("verdict"));
                            }
                            verdict__ = map_.next_value()?;
                        }
                        GeneratedField::Report => {
                            if report__.is_some() {
                                return Err(serde::de::Error::duplicate_field("report"));
                            }
                            report__ = map_.next_value()?;
                        }
                        GeneratedField::Unchanged => {
                            if unchanged__.is_some() {
                                return Err(serde::de::Error::duplicate_field("unchanged"));
                            }
                            unchanged__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Token => {
                            if token__.is_some() {
                                return Err(serde::de::Error::duplicate_field("token"));
                            }
                            token__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(CheckResponse {
                    verdict: verdict__,
                    report: report__,
                    unchanged: unchanged__.unwrap_or_default(),
                    token: token__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.CheckResponse", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ConfiguredHandler {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.ConfiguredHandler", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if true {
            struct_ser.serialize_field("pluginKey", &self.plugin_key)?;
        }
        if true {
            struct_ser.serialize_field("runtimeType", &self.runtime_type)?;
        }
        if true {
            struct_ser.serialize_field("configPath", &self.config_path)?;
        }
        if true {
            struct_ser.serialize_field("configPathExists", &self.config_path_exists)?;
        }
        if true {
            struct_ser.serialize_field("platform", &self.platform)?;
        }
        if true {
            struct_ser.serialize_field("source", &self.source)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for ConfiguredHandler {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "plugin_key",
            "pluginKey",
            "runtime_type",
            "runtimeType",
            "config_path",
            "configPath",
            "config_path_exists",
            "configPathExists",
            "platform",
            "source",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            PluginKey,
            RuntimeType,
            ConfigPath,
            ConfigPathExists,
            Platform,
            Source,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "pluginKey" | "plugin_key" => Ok(GeneratedField::PluginKey),
                            "runtimeType" | "runtime_type" => Ok(GeneratedField::RuntimeType),
                            "configPath" | "config_path" => Ok(GeneratedField::ConfigPath),
                            "configPathExists" | "config_path_exists" => Ok(GeneratedField::ConfigPathExists),
                            "platform" => Ok(GeneratedField::Platform),
                            "source" => Ok(GeneratedField::Source),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = ConfiguredHandler;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.ConfiguredHandler")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<ConfiguredHandler, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut plugin_key__ = None;
                let mut runtime_type__ = None;
                let mut config_path__ = None;
                let mut config_path_exists__ = None;
                let mut platform__ = None;
                let mut source__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::PluginKey => {
                            if plugin_key__.is_some() {
                                return Err(serde::de::Error::duplicate_field("pluginKey"));
                            }
                            plugin_key__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RuntimeType => {
                            if runtime_type__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeType"));
                            }
                            runtime_type__ = Some(map_.next_value()?);
                        }
                        GeneratedField::ConfigPath => {
                            if config_path__.is_some() {
                                return Err(serde::de::Error::duplicate_field("configPath"));
                            }
                            config_path__ = Some(map_.next_value()?);
                        }
                        GeneratedField::ConfigPathExists => {
                            if config_path_exists__.is_some() {
                                return Err(serde::de::Error::duplicate_field("configPathExists"));
                            }
                            config_path_exists__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Platform => {
                            if platform__.is_some() {
                                return Err(serde::de::Error::duplicate_field("platform"));
                            }
                            platform__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Source => {
                            if source__.is_some() {
                                return Err(serde::de::Error::duplicate_field("source"));
                            }
                            source__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(ConfiguredHandler {
                    name: name__.unwrap_or_default(),
                    plugin_key: plugin_key__.unwrap_or_default(),
                    runtime_type: runtime_type__.unwrap_or_default(),
                    config_path: config_path__.unwrap_or_default(),
                    config_path_exists: config_path_exists__.unwrap_or_default(),
                    platform: platform__.unwrap_or_default(),
                    source: source__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.ConfiguredHandler", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for CriRuntime {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.CriRuntime", len)?;
        if true {
            struct_ser.serialize_field("endpoint", &self.endpoint)?;
        }
        if true {
            struct_ser.serialize_field("reachable", &self.reachable)?;
        }
        if true {
            struct_ser.serialize_field("error", &self.error)?;
        }
        if true {
            struct_ser.serialize_field("runtimeName", &self.runtime_name)?;
        }
        if true {
            struct_ser.serialize_field("runtimeVersion", &self.runtime_version)?;
        }
        if true {
            struct_ser.serialize_field("runtimeApiVersion", &self.runtime_api_version)?;
        }
        if true {
            struct_ser.serialize_field("conditions", &self.conditions)?;
        }
        if true {
            struct_ser.serialize_field("handlers", &self.handlers)?;
        }
        if true {
            struct_ser.serialize_field("handlersSource", &self.handlers_source)?;
        }
        if let Some(v) = self.duration.as_ref() {
            struct_ser.serialize_field("duration", v)?;
        }
        if true {
            struct_ser.serialize_field("rootDir", &self.root_dir)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for CriRuntime {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "endpoint",
            "reachable",
            "error",
            "runtime_name",
            "runtimeName",
            "runtime_version",
            "runtimeVersion",
            "runtime_api_version",
            "runtimeApiVersion",
            "conditions",
            "handlers",
            "handlers_source",
            "handlersSource",
            "duration",
            "root_dir",
            "rootDir",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Endpoint,
            Reachable,
            Error,
            RuntimeName,
            RuntimeVersion,
            RuntimeApiVersion,
            Conditions,
            Handlers,
            HandlersSource,
            Duration,
            RootDir,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "endpoint" => Ok(GeneratedField::Endpoint),
                            "reachable" => Ok(GeneratedField::Reachable),
                            "error" => Ok(GeneratedField::Error),
                            "runtimeName" | "runtime_name" => Ok(GeneratedField::RuntimeName),
                            "runtimeVersion" | "runtime_version" => Ok(GeneratedField::RuntimeVersion),
                            "runtimeApiVersion" | "runtime_api_version" => Ok(GeneratedField::RuntimeApiVersion),
                            "conditions" => Ok(GeneratedField::Conditions),
                            "handlers" => Ok(GeneratedField::Handlers),
                            "handlersSource" | "handlers_source" => Ok(GeneratedField::HandlersSource),
                            "duration" => Ok(GeneratedField::Duration),
                            "rootDir" | "root_dir" => Ok(GeneratedField::RootDir),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = CriRuntime;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.CriRuntime")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<CriRuntime, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut endpoint__ = None;
                let mut reachable__ = None;
                let mut error__ = None;
                let mut runtime_name__ = None;
                let mut runtime_version__ = None;
                let mut runtime_api_version__ = None;
                let mut conditions__ = None;
                let mut handlers__ = None;
                let mut handlers_source__ = None;
                let mut duration__ = None;
                let mut root_dir__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Endpoint => {
                            if endpoint__.is_some() {
                                return Err(serde::de::Error::duplicate_field("endpoint"));
                            }
                            endpoint__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Reachable => {
                            if reachable__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reachable"));
                            }
                            reachable__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RuntimeName => {
                            if runtime_name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeName"));
                            }
                            runtime_name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RuntimeVersion => {
                            if runtime_version__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeVersion"));
                            }
                            runtime_version__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RuntimeApiVersion => {
                            if runtime_api_version__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeApiVersion"));
                            }
                            runtime_api_version__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Conditions => {
                            if conditions__.is_some() {
                                return Err(serde::de::Error::duplicate_field("conditions"));
                            }
                            conditions__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Handlers => {
                            if handlers__.is_some() {
                                return Err(serde::de::Error::duplicate_field("handlers"));
                            }
                            handlers__ = Some(map_.next_value()?);
                        }
                        GeneratedField::HandlersSource => {
                            if handlers_source__.is_some() {
                                return Err(serde::de::Error::duplicate_field("handlersSource"));
                            }
                            handlers_source__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Duration => {
                            if duration__.is_some() {
                                return Err(serde::de::Error::duplicate_field("duration"));
                            }
                            duration__ = map_.next_value()?;
                        }
                        GeneratedField::RootDir => {
                            if root_dir__.is_some() {
                                return Err(serde::de::Error::duplicate_field("rootDir"));
                            }
                            root_dir__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(CriRuntime {
                    endpoint: endpoint__.unwrap_or_default(),
                    reachable: reachable__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                    runtime_name: runtime_name__.unwrap_or_default(),
                    runtime_version: runtime_version__.unwrap_or_default(),
                    runtime_api_version: runtime_api_version__.unwrap_or_default(),
                    conditions: conditions__.unwrap_or_default(),
                    handlers: handlers__.unwrap_or_default(),
                    handlers_source: handlers_source__.unwrap_or_default(),
                    duration: duration__,
                    root_dir: root_dir__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.CriRuntime", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for DesiredState {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.DesiredState", len)?;
        if true {
            struct_ser.serialize_field("sysctls", &self.sysctls)?;
        }
        if true {
            struct_ser.serialize_field("requireUserns", &self.require_userns)?;
        }
        if true {
            struct_ser.serialize_field("requireIdmapMounts", &self.require_idmap_mounts)?;
        }
        if true {
            struct_ser.serialize_field("requireRuntimeHandlers", &self.require_runtime_handlers)?;
        }
        if true {
            struct_ser.serialize_field("requireGvisor", &self.require_gvisor)?;
        }
        if true {
            struct_ser.serialize_field("requireSandboxProbe", &self.require_sandbox_probe)?;
        }
        if true {
            struct_ser.serialize_field("requirePodUserns", &self.require_pod_userns)?;
        }
        if true {
            struct_ser.serialize_field("requireCanary", &self.require_canary)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for DesiredState {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "sysctls",
            "require_userns",
            "requireUserns",
            "require_idmap_mounts",
            "requireIdmapMounts",
            "require_runtime_handlers",
            "requireRuntimeHandlers",
            "require_gvisor",
            "requireGvisor",
            "require_sandbox_probe",
            "requireSandboxProbe",
            "require_pod_userns",
            "requirePodUserns",
            "require_canary",
            "requireCanary",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Sysctls,
            RequireUserns,
            RequireIdmapMounts,
            RequireRuntimeHandlers,
            RequireGvisor,
            RequireSandboxProbe,
            RequirePodUserns,
            RequireCanary,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "sysctls" => Ok(GeneratedField::Sysctls),
                            "requireUserns" | "require_userns" => Ok(GeneratedField::RequireUserns),
                            "requireIdmapMounts" | "require_idmap_mounts" => Ok(GeneratedField::RequireIdmapMounts),
                            "requireRuntimeHandlers" | "require_runtime_handlers" => Ok(GeneratedField::RequireRuntimeHandlers),
                            "requireGvisor" | "require_gvisor" => Ok(GeneratedField::RequireGvisor),
                            "requireSandboxProbe" | "require_sandbox_probe" => Ok(GeneratedField::RequireSandboxProbe),
                            "requirePodUserns" | "require_pod_userns" => Ok(GeneratedField::RequirePodUserns),
                            "requireCanary" | "require_canary" => Ok(GeneratedField::RequireCanary),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = DesiredState;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.DesiredState")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<DesiredState, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut sysctls__ = None;
                let mut require_userns__ = None;
                let mut require_idmap_mounts__ = None;
                let mut require_runtime_handlers__ = None;
                let mut require_gvisor__ = None;
                let mut require_sandbox_probe__ = None;
                let mut require_pod_userns__ = None;
                let mut require_canary__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Sysctls => {
                            if sysctls__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sysctls"));
                            }
                            sysctls__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireUserns => {
                            if require_userns__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireUserns"));
                            }
                            require_userns__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireIdmapMounts => {
                            if require_idmap_mounts__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireIdmapMounts"));
                            }
                            require_idmap_mounts__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireRuntimeHandlers => {
                            if require_runtime_handlers__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireRuntimeHandlers"));
                            }
                            require_runtime_handlers__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireGvisor => {
                            if require_gvisor__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireGvisor"));
                            }
                            require_gvisor__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireSandboxProbe => {
                            if require_sandbox_probe__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireSandboxProbe"));
                            }
                            require_sandbox_probe__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequirePodUserns => {
                            if require_pod_userns__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requirePodUserns"));
                            }
                            require_pod_userns__ = Some(map_.next_value()?);
                        }
                        GeneratedField::RequireCanary => {
                            if require_canary__.is_some() {
                                return Err(serde::de::Error::duplicate_field("requireCanary"));
                            }
                            require_canary__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(DesiredState {
                    sysctls: sysctls__.unwrap_or_default(),
                    require_userns: require_userns__.unwrap_or_default(),
                    require_idmap_mounts: require_idmap_mounts__.unwrap_or_default(),
                    require_runtime_handlers: require_runtime_handlers__.unwrap_or_default(),
                    require_gvisor: require_gvisor__.unwrap_or_default(),
                    require_sandbox_probe: require_sandbox_probe__.unwrap_or_default(),
                    require_pod_userns: require_pod_userns__.unwrap_or_default(),
                    require_canary: require_canary__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.DesiredState", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for DropIn {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.DropIn", len)?;
        if true {
            struct_ser.serialize_field("path", &self.path)?;
        }
        if true {
            struct_ser.serialize_field("parsed", &self.parsed)?;
        }
        if true {
            struct_ser.serialize_field("error", &self.error)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for DropIn {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "path",
            "parsed",
            "error",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Path,
            Parsed,
            Error,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "path" => Ok(GeneratedField::Path),
                            "parsed" => Ok(GeneratedField::Parsed),
                            "error" => Ok(GeneratedField::Error),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = DropIn;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.DropIn")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<DropIn, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut path__ = None;
                let mut parsed__ = None;
                let mut error__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Path => {
                            if path__.is_some() {
                                return Err(serde::de::Error::duplicate_field("path"));
                            }
                            path__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Parsed => {
                            if parsed__.is_some() {
                                return Err(serde::de::Error::duplicate_field("parsed"));
                            }
                            parsed__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(DropIn {
                    path: path__.unwrap_or_default(),
                    parsed: parsed__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.DropIn", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Finding {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Finding", len)?;
        if true {
            struct_ser.serialize_field("code", &self.code)?;
        }
        if true {
            struct_ser.serialize_field("subject", &self.subject)?;
        }
        if true {
            struct_ser.serialize_field("expected", &self.expected)?;
        }
        if true {
            struct_ser.serialize_field("actual", &self.actual)?;
        }
        if true {
            struct_ser.serialize_field("message", &self.message)?;
        }
        if true {
            struct_ser.serialize_field("blocking", &self.blocking)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Finding {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "code",
            "subject",
            "expected",
            "actual",
            "message",
            "blocking",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Code,
            Subject,
            Expected,
            Actual,
            Message,
            Blocking,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "code" => Ok(GeneratedField::Code),
                            "subject" => Ok(GeneratedField::Subject),
                            "expected" => Ok(GeneratedField::Expected),
                            "actual" => Ok(GeneratedField::Actual),
                            "message" => Ok(GeneratedField::Message),
                            "blocking" => Ok(GeneratedField::Blocking),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Finding;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Finding")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Finding, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut code__ = None;
                let mut subject__ = None;
                let mut expected__ = None;
                let mut actual__ = None;
                let mut message__ = None;
                let mut blocking__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Code => {
                            if code__.is_some() {
                                return Err(serde::de::Error::duplicate_field("code"));
                            }
                            code__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Subject => {
                            if subject__.is_some() {
                                return Err(serde::de::Error::duplicate_field("subject"));
                            }
                            subject__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Expected => {
                            if expected__.is_some() {
                                return Err(serde::de::Error::duplicate_field("expected"));
                            }
                            expected__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Actual => {
                            if actual__.is_some() {
                                return Err(serde::de::Error::duplicate_field("actual"));
                            }
                            actual__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Message => {
                            if message__.is_some() {
                                return Err(serde::de::Error::duplicate_field("message"));
                            }
                            message__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Blocking => {
                            if blocking__.is_some() {
                                return Err(serde::de::Error::duplicate_field("blocking"));
                            }
                            blocking__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Finding {
                    code: code__.unwrap_or_default(),
                    subject: subject__.unwrap_or_default(),
                    expected: expected__.unwrap_or_default(),
                    actual: actual__.unwrap_or_default(),
                    message: message__.unwrap_or_default(),
                    blocking: blocking__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Finding", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for GetReportRequest {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.GetReportRequest", len)?;
        if true {
            struct_ser.serialize_field("refresh", &self.refresh)?;
        }
        if true {
            struct_ser.serialize_field("sandboxProbe", &self.sandbox_probe)?;
        }
        if true {
            struct_ser.serialize_field("ifChangedFrom", &self.if_changed_from)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for GetReportRequest {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "refresh",
            "sandbox_probe",
            "sandboxProbe",
            "if_changed_from",
            "ifChangedFrom",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Refresh,
            SandboxProbe,
            IfChangedFrom,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "refresh" => Ok(GeneratedField::Refresh),
                            "sandboxProbe" | "sandbox_probe" => Ok(GeneratedField::SandboxProbe),
                            "ifChangedFrom" | "if_changed_from" => Ok(GeneratedField::IfChangedFrom),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = GetReportRequest;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.GetReportRequest")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<GetReportRequest, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut refresh__ = None;
                let mut sandbox_probe__ = None;
                let mut if_changed_from__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Refresh => {
                            if refresh__.is_some() {
                                return Err(serde::de::Error::duplicate_field("refresh"));
                            }
                            refresh__ = Some(map_.next_value()?);
                        }
                        GeneratedField::SandboxProbe => {
                            if sandbox_probe__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sandboxProbe"));
                            }
                            sandbox_probe__ = Some(map_.next_value()?);
                        }
                        GeneratedField::IfChangedFrom => {
                            if if_changed_from__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ifChangedFrom"));
                            }
                            if_changed_from__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(GetReportRequest {
                    refresh: refresh__.unwrap_or_default(),
                    sandbox_probe: sandbox_probe__.unwrap_or_default(),
                    if_changed_from: if_changed_from__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.GetReportRequest", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for GetReportResponse {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.GetReportResponse", len)?;
        if let Some(v) = self.report.as_ref() {
            struct_ser.serialize_field("report", v)?;
        }
        if true {
            struct_ser.serialize_field("unchanged", &self.unchanged)?;
        }
        if true {
            struct_ser.serialize_field("token", &self.token)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for GetReportResponse {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "report",
            "unchanged",
            "token",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Report,
            Unchanged,
            Token,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "report" => Ok(GeneratedField::Report),
                            "unchanged" => Ok(GeneratedField::Unchanged),
                            "token" => Ok(GeneratedField::Token),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = GetReportResponse;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.GetReportResponse")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<GetReportResponse, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut report__ = None;
                let mut unchanged__ = None;
                let mut token__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Report => {
                            if report__.is_some() {
                                return Err(serde::de::Error::duplicate_field("report"));
                            }
                            report__ = map_.next_value()?;
                        }
                        GeneratedField::Unchanged => {
                            if unchanged__.is_some() {
                                return Err(serde::de::Error::duplicate_field("unchanged"));
                            }
                            unchanged__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Token => {
                            if token__.is_some() {
                                return Err(serde::de::Error::duplicate_field("token"));
                            }
                            token__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(GetReportResponse {
                    report: report__,
                    unchanged: unchanged__.unwrap_or_default(),
                    token: token__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.GetReportResponse", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Gvisor {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Gvisor", len)?;
        if true {
            let v = GvisorReadiness::try_from(self.readiness)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.readiness)))?;
            struct_ser.serialize_field("readiness", &v)?;
        }
        if true {
            struct_ser.serialize_field("reasons", &self.reasons)?;
        }
        if true {
            struct_ser.serialize_field("binaries", &self.binaries)?;
        }
        if true {
            struct_ser.serialize_field("dropIns", &self.drop_ins)?;
        }
        if true {
            struct_ser.serialize_field("configuredHandlers", &self.configured_handlers)?;
        }
        if let Some(v) = self.cri.as_ref() {
            struct_ser.serialize_field("cri", v)?;
        }
        if true {
            struct_ser.serialize_field("preconditions", &self.preconditions)?;
        }
        if let Some(v) = self.sandbox.as_ref() {
            struct_ser.serialize_field("sandbox", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Gvisor {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "readiness",
            "reasons",
            "binaries",
            "drop_ins",
            "dropIns",
            "configured_handlers",
            "configuredHandlers",
            "cri",
            "preconditions",
            "sandbox",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Readiness,
            Reasons,
            Binaries,
            DropIns,
            ConfiguredHandlers,
            Cri,
            Preconditions,
            Sandbox,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "readiness" => Ok(GeneratedField::Readiness),
                            "reasons" => Ok(GeneratedField::Reasons),
                            "binaries" => Ok(GeneratedField::Binaries),
                            "dropIns" | "drop_ins" => Ok(GeneratedField::DropIns),
                            "configuredHandlers" | "configured_handlers" => Ok(GeneratedField::ConfiguredHandlers),
                            "cri" => Ok(GeneratedField::Cri),
                            "preconditions" => Ok(GeneratedField::Preconditions),
                            "sandbox" => Ok(GeneratedField::Sandbox),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Gvisor;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Gvisor")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Gvisor, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut readiness__ = None;
                let mut reasons__ = None;
                let mut binaries__ = None;
                let mut drop_ins__ = None;
                let mut configured_handlers__ = None;
                let mut cri__ = None;
                let mut preconditions__ = None;
                let mut sandbox__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Readiness => {
                            if readiness__.is_some() {
                                return Err(serde::de::Error::duplicate_field("readiness"));
                            }
                            readiness__ = Some(map_.next_value::<GvisorReadiness>()? as i32);
                        }
                        GeneratedField::Reasons => {
                            if reasons__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reasons"));
                            }
                            reasons__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Binaries => {
                            if binaries__.is_some() {
                                return Err(serde::de::Error::duplicate_field("binaries"));
                            }
                            binaries__ = Some(map_.next_value()?);
                        }
                        GeneratedField::DropIns => {
                            if drop_ins__.is_some() {
                                return Err(serde::de::Error::duplicate_field("dropIns"));
                            }
                            drop_ins__ = Some(map_.next_value()?);
                        }
                        GeneratedField::ConfiguredHandlers => {
                            if configured_handlers__.is_some() {
                                return Err(serde::de::Error::duplicate_field("configuredHandlers"));
                            }
                            configured_handlers__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Cri => {
                            if cri__.is_some() {
                                return Err(serde::de::Error::duplicate_field("cri"));
                            }
                            cri__ = map_.next_value()?;
                        }
                        GeneratedField::Preconditions => {
                            if preconditions__.is_some() {
                                return Err(serde::de::Error::duplicate_field("preconditions"));
                            }
                            preconditions__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Sandbox => {
                            if sandbox__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sandbox"));
                            }
                            sandbox__ = map_.next_value()?;
                        }
                    }
                }
                Ok(Gvisor {
                    readiness: readiness__.unwrap_or_default(),
                    reasons: reasons__.unwrap_or_default(),
                    binaries: binaries__.unwrap_or_default(),
                    drop_ins: drop_ins__.unwrap_or_default(),
                    configured_handlers: configured_handlers__.unwrap_or_default(),
                    cri: cri__,
                    preconditions: preconditions__.unwrap_or_default(),
                    sandbox: sandbox__,
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Gvisor", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for GvisorReadiness {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "GVISOR_READINESS_UNSPECIFIED",
            Self::Ready => "GVISOR_READINESS_READY",
            Self::NotReady => "GVISOR_READINESS_NOT_READY",
            Self::NotInstalled => "GVISOR_READINESS_NOT_INSTALLED",
            Self::Unknown => "GVISOR_READINESS_UNKNOWN",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for GvisorReadiness {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "GVISOR_READINESS_UNSPECIFIED",
            "GVISOR_READINESS_READY",
            "GVISOR_READINESS_NOT_READY",
            "GVISOR_READINESS_NOT_INSTALLED",
            "GVISOR_READINESS_UNKNOWN",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = GvisorReadiness;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "GVISOR_READINESS_UNSPECIFIED" => Ok(GvisorReadiness::Unspecified),
                    "GVISOR_READINESS_READY" => Ok(GvisorReadiness::Ready),
                    "GVISOR_READINESS_NOT_READY" => Ok(GvisorReadiness::NotReady),
                    "GVISOR_READINESS_NOT_INSTALLED" => Ok(GvisorReadiness::NotInstalled),
                    "GVISOR_READINESS_UNKNOWN" => Ok(GvisorReadiness::Unknown),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for NodeIdentity {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.NodeIdentity", len)?;
        if true {
            struct_ser.serialize_field("hostname", &self.hostname)?;
        }
        if true {
            struct_ser.serialize_field("hostnameSource", &self.hostname_source)?;
        }
        if true {
            struct_ser.serialize_field("bootId", &self.boot_id)?;
        }
        if true {
            struct_ser.serialize_field("machineId", &self.machine_id)?;
        }
        if true {
            struct_ser.serialize_field("kernelRelease", &self.kernel_release)?;
        }
        if true {
            struct_ser.serialize_field("osName", &self.os_name)?;
        }
        if true {
            struct_ser.serialize_field("osVersionId", &self.os_version_id)?;
        }
        if true {
            struct_ser.serialize_field("appSpecificMachineId", &self.app_specific_machine_id)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for NodeIdentity {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "hostname",
            "hostname_source",
            "hostnameSource",
            "boot_id",
            "bootId",
            "machine_id",
            "machineId",
            "kernel_release",
            "kernelRelease",
            "os_name",
            "osName",
            "os_version_id",
            "osVersionId",
            "app_specific_machine_id",
            "appSpecificMachineId",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Hostname,
            HostnameSource,
            BootId,
            MachineId,
            KernelRelease,
            OsName,
            OsVersionId,
            AppSpecificMachineId,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "hostname" => Ok(GeneratedField::Hostname),
                            "hostnameSource" | "hostname_source" => Ok(GeneratedField::HostnameSource),
                            "bootId" | "boot_id" => Ok(GeneratedField::BootId),
                            "machineId" | "machine_id" => Ok(GeneratedField::MachineId),
                            "kernelRelease" | "kernel_release" => Ok(GeneratedField::KernelRelease),
                            "osName" | "os_name" => Ok(GeneratedField::OsName),
                            "osVersionId" | "os_version_id" => Ok(GeneratedField::OsVersionId),
                            "appSpecificMachineId" | "app_specific_machine_id" => Ok(GeneratedField::AppSpecificMachineId),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = NodeIdentity;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.NodeIdentity")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<NodeIdentity, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut hostname__ = None;
                let mut hostname_source__ = None;
                let mut boot_id__ = None;
                let mut machine_id__ = None;
                let mut kernel_release__ = None;
                let mut os_name__ = None;
                let mut os_version_id__ = None;
                let mut app_specific_machine_id__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Hostname => {
                            if hostname__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hostname"));
                            }
                            hostname__ = Some(map_.next_value()?);
                        }
                        GeneratedField::HostnameSource => {
                            if hostname_source__.is_some() {
                                return Err(serde::de::Error::duplicate_field("hostnameSource"));
                            }
                            hostname_source__ = Some(map_.next_value()?);
                        }
                        GeneratedField::BootId => {
                            if boot_id__.is_some() {
                                return Err(serde::de::Error::duplicate_field("bootId"));
                            }
                            boot_id__ = Some(map_.next_value()?);
                        }
                        GeneratedField::MachineId => {
                            if machine_id__.is_some() {
                                return Err(serde::de::Error::duplicate_field("machineId"));
                            }
                            machine_id__ = Some(map_.next_value()?);
                        }
                        GeneratedField::KernelRelease => {
                            if kernel_release__.is_some() {
                                return Err(serde::de::Error::duplicate_field("kernelRelease"));
                            }
                            kernel_release__ = Some(map_.next_value()?);
                        }
                        GeneratedField::OsName => {
                            if os_name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("osName"));
                            }
                            os_name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::OsVersionId => {
                            if os_version_id__.is_some() {
                                return Err(serde::de::Error::duplicate_field("osVersionId"));
                            }
                            os_version_id__ = Some(map_.next_value()?);
                        }
                        GeneratedField::AppSpecificMachineId => {
                            if app_specific_machine_id__.is_some() {
                                return Err(serde::de::Error::duplicate_field("appSpecificMachineId"));
                            }
                            app_specific_machine_id__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(NodeIdentity {
                    hostname: hostname__.unwrap_or_default(),
                    hostname_source: hostname_source__.unwrap_or_default(),
                    boot_id: boot_id__.unwrap_or_default(),
                    machine_id: machine_id__.unwrap_or_default(),
                    kernel_release: kernel_release__.unwrap_or_default(),
                    os_name: os_name__.unwrap_or_default(),
                    os_version_id: os_version_id__.unwrap_or_default(),
                    app_specific_machine_id: app_specific_machine_id__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.NodeIdentity", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Precondition {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Precondition", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if true {
            struct_ser.serialize_field("satisfied", &self.satisfied)?;
        }
        if true {
            struct_ser.serialize_field("known", &self.known)?;
        }
        if true {
            struct_ser.serialize_field("detail", &self.detail)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Precondition {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "satisfied",
            "known",
            "detail",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Satisfied,
            Known,
            Detail,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "satisfied" => Ok(GeneratedField::Satisfied),
                            "known" => Ok(GeneratedField::Known),
                            "detail" => Ok(GeneratedField::Detail),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Precondition;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Precondition")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Precondition, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut satisfied__ = None;
                let mut known__ = None;
                let mut detail__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Satisfied => {
                            if satisfied__.is_some() {
                                return Err(serde::de::Error::duplicate_field("satisfied"));
                            }
                            satisfied__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Known => {
                            if known__.is_some() {
                                return Err(serde::de::Error::duplicate_field("known"));
                            }
                            known__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Detail => {
                            if detail__.is_some() {
                                return Err(serde::de::Error::duplicate_field("detail"));
                            }
                            detail__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Precondition {
                    name: name__.unwrap_or_default(),
                    satisfied: satisfied__.unwrap_or_default(),
                    known: known__.unwrap_or_default(),
                    detail: detail__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Precondition", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Probe {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Probe", len)?;
        if true {
            let v = ProbeOutcome::try_from(self.outcome)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.outcome)))?;
            struct_ser.serialize_field("outcome", &v)?;
        }
        if true {
            struct_ser.serialize_field("errno", &self.errno)?;
        }
        if true {
            struct_ser.serialize_field("errnoName", &self.errno_name)?;
        }
        if true {
            struct_ser.serialize_field("message", &self.message)?;
        }
        if let Some(v) = self.duration.as_ref() {
            struct_ser.serialize_field("duration", v)?;
        }
        if let Some(v) = self.ran_at.as_ref() {
            struct_ser.serialize_field("ranAt", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Probe {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "outcome",
            "errno",
            "errno_name",
            "errnoName",
            "message",
            "duration",
            "ran_at",
            "ranAt",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Outcome,
            Errno,
            ErrnoName,
            Message,
            Duration,
            RanAt,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "outcome" => Ok(GeneratedField::Outcome),
                            "errno" => Ok(GeneratedField::Errno),
                            "errnoName" | "errno_name" => Ok(GeneratedField::ErrnoName),
                            "message" => Ok(GeneratedField::Message),
                            "duration" => Ok(GeneratedField::Duration),
                            "ranAt" | "ran_at" => Ok(GeneratedField::RanAt),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Probe;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Probe")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Probe, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut outcome__ = None;
                let mut errno__ = None;
                let mut errno_name__ = None;
                let mut message__ = None;
                let mut duration__ = None;
                let mut ran_at__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Outcome => {
                            if outcome__.is_some() {
                                return Err(serde::de::Error::duplicate_field("outcome"));
                            }
                            outcome__ = Some(map_.next_value::<ProbeOutcome>()? as i32);
                        }
                        GeneratedField::Errno => {
                            if errno__.is_some() {
                                return Err(serde::de::Error::duplicate_field("errno"));
                            }
                            errno__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::ErrnoName => {
                            if errno_name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("errnoName"));
                            }
                            errno_name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Message => {
                            if message__.is_some() {
                                return Err(serde::de::Error::duplicate_field("message"));
                            }
                            message__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Duration => {
                            if duration__.is_some() {
                                return Err(serde::de::Error::duplicate_field("duration"));
                            }
                            duration__ = map_.next_value()?;
                        }
                        GeneratedField::RanAt => {
                            if ran_at__.is_some() {
                                return Err(serde::de::Error::duplicate_field("ranAt"));
                            }
                            ran_at__ = map_.next_value()?;
                        }
                    }
                }
                Ok(Probe {
                    outcome: outcome__.unwrap_or_default(),
                    errno: errno__.unwrap_or_default(),
                    errno_name: errno_name__.unwrap_or_default(),
                    message: message__.unwrap_or_default(),
                    duration: duration__,
                    ran_at: ran_at__,
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Probe", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for ProbeOutcome {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "PROBE_OUTCOME_UNSPECIFIED",
            Self::Passed => "PROBE_OUTCOME_PASSED",
            Self::Failed => "PROBE_OUTCOME_FAILED",
            Self::Skipped => "PROBE_OUTCOME_SKIPPED",
            Self::Error => "PROBE_OUTCOME_ERROR",
            Self::Inconclusive => "PROBE_OUTCOME_INCONCLUSIVE",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for ProbeOutcome {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "PROBE_OUTCOME_UNSPECIFIED",
            "PROBE_OUTCOME_PASSED",
            "PROBE_OUTCOME_FAILED",
            "PROBE_OUTCOME_SKIPPED",
            "PROBE_OUTCOME_ERROR",
            "PROBE_OUTCOME_INCONCLUSIVE",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = ProbeOutcome;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "PROBE_OUTCOME_UNSPECIFIED" => Ok(ProbeOutcome::Unspecified),
                    "PROBE_OUTCOME_PASSED" => Ok(ProbeOutcome::Passed),
                    "PROBE_OUTCOME_FAILED" => Ok(ProbeOutcome::Failed),
                    "PROBE_OUTCOME_SKIPPED" => Ok(ProbeOutcome::Skipped),
                    "PROBE_OUTCOME_ERROR" => Ok(ProbeOutcome::Error),
                    "PROBE_OUTCOME_INCONCLUSIVE" => Ok(ProbeOutcome::Inconclusive),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for Report {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Report", len)?;
        if let Some(v) = self.node.as_ref() {
            struct_ser.serialize_field("node", v)?;
        }
        if let Some(v) = self.agent.as_ref() {
            struct_ser.serialize_field("agent", v)?;
        }
        if let Some(v) = self.observed_at.as_ref() {
            struct_ser.serialize_field("observedAt", v)?;
        }
        if true {
            #[allow(clippy::needless_borrow)]
            #[allow(clippy::needless_borrows_for_generic_args)]
            struct_ser.serialize_field("generation", ToString::to_string(&self.generation).as_str())?;
        }
        if true {
            struct_ser.serialize_field("fingerprint", &self.fingerprint)?;
        }
        if let Some(v) = self.user_namespaces.as_ref() {
            struct_ser.serialize_field("userNamespaces", v)?;
        }
        if let Some(v) = self.gvisor.as_ref() {
            struct_ser.serialize_field("gvisor", v)?;
        }
        if true {
            struct_ser.serialize_field("sysctls", &self.sysctls)?;
        }
        if true {
            struct_ser.serialize_field("canaries", &self.canaries)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Report {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "node",
            "agent",
            "observed_at",
            "observedAt",
            "generation",
            "fingerprint",
            "user_namespaces",
            "userNamespaces",
            "gvisor",
            "sysctls",
            "canaries",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Node,
            Agent,
            ObservedAt,
            Generation,
            Fingerprint,
            UserNamespaces,
            Gvisor,
            Sysctls,
            Canaries,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "node" => Ok(GeneratedField::Node),
                            "agent" => Ok(GeneratedField::Agent),
                            "observedAt" | "observed_at" => Ok(GeneratedField::ObservedAt),
                            "generation" => Ok(GeneratedField::Generation),
                            "fingerprint" => Ok(GeneratedField::Fingerprint),
                            "userNamespaces" | "user_namespaces" => Ok(GeneratedField::UserNamespaces),
                            "gvisor" => Ok(GeneratedField::Gvisor),
                            "sysctls" => Ok(GeneratedField::Sysctls),
                            "canaries" => Ok(GeneratedField::Canaries),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Report;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Report")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Report, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut node__ = None;
                let mut agent__ = None;
                let mut observed_at__ = None;
                let mut generation__ = None;
                let mut fingerprint__ = None;
                let mut user_namespaces__ = None;
                let mut gvisor__ = None;
                let mut sysctls__ = None;
                let mut canaries__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Node => {
                            if node__.is_some() {
                                return Err(serde::de::Error::duplicate_field("node"));
                            }
                            node__ = map_.next_value()?;
                        }
                        GeneratedField::Agent => {
                            if agent__.is_some() {
                                return Err(serde::de::Error::duplicate_field("agent"));
                            }
                            agent__ = map_.next_value()?;
                        }
                        GeneratedField::ObservedAt => {
                            if observed_at__.is_some() {
                                return Err(serde::de::Error::duplicate_field("observedAt"));
                            }
                            observed_at__ = map_.next_value()?;
                        }
                        GeneratedField::Generation => {
                            if generation__.is_some() {
                                return Err(serde::de::Error::duplicate_field("generation"));
                            }
                            generation__ = 
                                Some(map_.next_value::<::pbjson::private::NumberDeserialize<_>>()?.0)
                            ;
                        }
                        GeneratedField::Fingerprint => {
                            if fingerprint__.is_some() {
                                return Err(serde::de::Error::duplicate_field("fingerprint"));
                            }
                            fingerprint__ = Some(map_.next_value()?);
                        }
                        GeneratedField::UserNamespaces => {
                            if user_namespaces__.is_some() {
                                return Err(serde::de::Error::duplicate_field("userNamespaces"));
                            }
                            user_namespaces__ = map_.next_value()?;
                        }
                        GeneratedField::Gvisor => {
                            if gvisor__.is_some() {
                                return Err(serde::de::Error::duplicate_field("gvisor"));
                            }
                            gvisor__ = map_.next_value()?;
                        }
                        GeneratedField::Sysctls => {
                            if sysctls__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sysctls"));
                            }
                            sysctls__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Canaries => {
                            if canaries__.is_some() {
                                return Err(serde::de::Error::duplicate_field("canaries"));
                            }
                            canaries__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Report {
                    node: node__,
                    agent: agent__,
                    observed_at: observed_at__,
                    generation: generation__.unwrap_or_default(),
                    fingerprint: fingerprint__.unwrap_or_default(),
                    user_namespaces: user_namespaces__,
                    gvisor: gvisor__,
                    sysctls: sysctls__.unwrap_or_default(),
                    canaries: canaries__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Report", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for RuntimeCondition {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.RuntimeCondition", len)?;
        if true {
            struct_ser.serialize_field("type", &self.r#type)?;
        }
        if true {
            struct_ser.serialize_field("status", &self.status)?;
        }
        if true {
            struct_ser.serialize_field("reason", &self.reason)?;
        }
        if true {
            struct_ser.serialize_field("message", &self.message)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for RuntimeCondition {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "type",
            "status",
            "reason",
            "message",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Type,
            Status,
            Reason,
            Message,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "type" => Ok(GeneratedField::Type),
                            "status" => Ok(GeneratedField::Status),
                            "reason" => Ok(GeneratedField::Reason),
                            "message" => Ok(GeneratedField::Message),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = RuntimeCondition;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.RuntimeCondition")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<RuntimeCondition, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut r#type__ = None;
                let mut status__ = None;
                let mut reason__ = None;
                let mut message__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Type => {
                            if r#type__.is_some() {
                                return Err(serde::de::Error::duplicate_field("type"));
                            }
                            r#type__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Status => {
                            if status__.is_some() {
                                return Err(serde::de::Error::duplicate_field("status"));
                            }
                            status__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Reason => {
                            if reason__.is_some() {
                                return Err(serde::de::Error::duplicate_field("reason"));
                            }
                            reason__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Message => {
                            if message__.is_some() {
                                return Err(serde::de::Error::duplicate_field("message"));
                            }
                            message__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(RuntimeCondition {
                    r#type: r#type__.unwrap_or_default(),
                    status: status__.unwrap_or_default(),
                    reason: reason__.unwrap_or_default(),
                    message: message__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.RuntimeCondition", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for RuntimeHandler {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.RuntimeHandler", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if let Some(v) = self.user_namespaces.as_ref() {
            struct_ser.serialize_field("userNamespaces", v)?;
        }
        if let Some(v) = self.recursive_read_only_mounts.as_ref() {
            struct_ser.serialize_field("recursiveReadOnlyMounts", v)?;
        }
        if true {
            struct_ser.serialize_field("runtimeType", &self.runtime_type)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for RuntimeHandler {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "user_namespaces",
            "userNamespaces",
            "recursive_read_only_mounts",
            "recursiveReadOnlyMounts",
            "runtime_type",
            "runtimeType",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            UserNamespaces,
            RecursiveReadOnlyMounts,
            RuntimeType,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "userNamespaces" | "user_namespaces" => Ok(GeneratedField::UserNamespaces),
                            "recursiveReadOnlyMounts" | "recursive_read_only_mounts" => Ok(GeneratedField::RecursiveReadOnlyMounts),
                            "runtimeType" | "runtime_type" => Ok(GeneratedField::RuntimeType),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = RuntimeHandler;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.RuntimeHandler")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<RuntimeHandler, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut user_namespaces__ = None;
                let mut recursive_read_only_mounts__ = None;
                let mut runtime_type__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::UserNamespaces => {
                            if user_namespaces__.is_some() {
                                return Err(serde::de::Error::duplicate_field("userNamespaces"));
                            }
                            user_namespaces__ = map_.next_value()?;
                        }
                        GeneratedField::RecursiveReadOnlyMounts => {
                            if recursive_read_only_mounts__.is_some() {
                                return Err(serde::de::Error::duplicate_field("recursiveReadOnlyMounts"));
                            }
                            recursive_read_only_mounts__ = map_.next_value()?;
                        }
                        GeneratedField::RuntimeType => {
                            if runtime_type__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeType"));
                            }
                            runtime_type__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(RuntimeHandler {
                    name: name__.unwrap_or_default(),
                    user_namespaces: user_namespaces__,
                    recursive_read_only_mounts: recursive_read_only_mounts__,
                    runtime_type: runtime_type__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.RuntimeHandler", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Sysctl {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Sysctl", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if true {
            let v = SysctlState::try_from(self.state)
                .map_err(|_| serde::ser::Error::custom(format!("Invalid variant {}", self.state)))?;
            struct_ser.serialize_field("state", &v)?;
        }
        if true {
            struct_ser.serialize_field("value", &self.value)?;
        }
        if true {
            struct_ser.serialize_field("error", &self.error)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Sysctl {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "state",
            "value",
            "error",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            State,
            Value,
            Error,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "state" => Ok(GeneratedField::State),
                            "value" => Ok(GeneratedField::Value),
                            "error" => Ok(GeneratedField::Error),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Sysctl;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Sysctl")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Sysctl, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut state__ = None;
                let mut value__ = None;
                let mut error__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::State => {
                            if state__.is_some() {
                                return Err(serde::de::Error::duplicate_field("state"));
                            }
                            state__ = Some(map_.next_value::<SysctlState>()? as i32);
                        }
                        GeneratedField::Value => {
                            if value__.is_some() {
                                return Err(serde::de::Error::duplicate_field("value"));
                            }
                            value__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Error => {
                            if error__.is_some() {
                                return Err(serde::de::Error::duplicate_field("error"));
                            }
                            error__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Sysctl {
                    name: name__.unwrap_or_default(),
                    state: state__.unwrap_or_default(),
                    value: value__.unwrap_or_default(),
                    error: error__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Sysctl", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for SysctlExpectation {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.SysctlExpectation", len)?;
        if true {
            struct_ser.serialize_field("name", &self.name)?;
        }
        if true {
            struct_ser.serialize_field("value", &self.value)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for SysctlExpectation {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "name",
            "value",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Name,
            Value,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "name" => Ok(GeneratedField::Name),
                            "value" => Ok(GeneratedField::Value),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = SysctlExpectation;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.SysctlExpectation")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<SysctlExpectation, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut name__ = None;
                let mut value__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Name => {
                            if name__.is_some() {
                                return Err(serde::de::Error::duplicate_field("name"));
                            }
                            name__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Value => {
                            if value__.is_some() {
                                return Err(serde::de::Error::duplicate_field("value"));
                            }
                            value__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(SysctlExpectation {
                    name: name__.unwrap_or_default(),
                    value: value__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.SysctlExpectation", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for SysctlState {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        let variant = match self {
            Self::Unspecified => "SYSCTL_STATE_UNSPECIFIED",
            Self::Present => "SYSCTL_STATE_PRESENT",
            Self::Absent => "SYSCTL_STATE_ABSENT",
            Self::Unreadable => "SYSCTL_STATE_UNREADABLE",
            Self::Withheld => "SYSCTL_STATE_WITHHELD",
        };
        serializer.serialize_str(variant)
    }
}
impl<'de> serde::Deserialize<'de> for SysctlState {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "SYSCTL_STATE_UNSPECIFIED",
            "SYSCTL_STATE_PRESENT",
            "SYSCTL_STATE_ABSENT",
            "SYSCTL_STATE_UNREADABLE",
            "SYSCTL_STATE_WITHHELD",
        ];

        struct GeneratedVisitor;

        impl serde::de::Visitor<'_> for GeneratedVisitor {
            type Value = SysctlState;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "expected one of: {:?}", &FIELDS)
            }

            fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Signed(v), &self)
                    })
            }

            fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                i32::try_from(v)
                    .ok()
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| {
                        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &self)
                    })
            }

            fn visit_str<E>(self, value: &str) -> std::result::Result<Self::Value, E>
            where
                E: serde::de::Error,
            {
                match value {
                    "SYSCTL_STATE_UNSPECIFIED" => Ok(SysctlState::Unspecified),
                    "SYSCTL_STATE_PRESENT" => Ok(SysctlState::Present),
                    "SYSCTL_STATE_ABSENT" => Ok(SysctlState::Absent),
                    "SYSCTL_STATE_UNREADABLE" => Ok(SysctlState::Unreadable),
                    "SYSCTL_STATE_WITHHELD" => Ok(SysctlState::Withheld),
                    _ => Err(serde::de::Error::unknown_variant(value, FIELDS)),
                }
            }
        }
        deserializer.deserialize_any(GeneratedVisitor)
    }
}
impl serde::Serialize for UserNamespaces {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.UserNamespaces", len)?;
        if true {
            struct_ser.serialize_field("sysctls", &self.sysctls)?;
        }
        if true {
            struct_ser.serialize_field("initialUserNamespace", &self.initial_user_namespace)?;
        }
        if true {
            struct_ser.serialize_field("namespaceNote", &self.namespace_note)?;
        }
        if let Some(v) = self.userns_create.as_ref() {
            struct_ser.serialize_field("usernsCreate", v)?;
        }
        if let Some(v) = self.idmap_mount.as_ref() {
            struct_ser.serialize_field("idmapMount", v)?;
        }
        if let Some(v) = self.runtime_state_idmap.as_ref() {
            struct_ser.serialize_field("runtimeStateIdmap", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for UserNamespaces {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "sysctls",
            "initial_user_namespace",
            "initialUserNamespace",
            "namespace_note",
            "namespaceNote",
            "userns_create",
            "usernsCreate",
            "idmap_mount",
            "idmapMount",
            "runtime_state_idmap",
            "runtimeStateIdmap",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Sysctls,
            InitialUserNamespace,
            NamespaceNote,
            UsernsCreate,
            IdmapMount,
            RuntimeStateIdmap,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "sysctls" => Ok(GeneratedField::Sysctls),
                            "initialUserNamespace" | "initial_user_namespace" => Ok(GeneratedField::InitialUserNamespace),
                            "namespaceNote" | "namespace_note" => Ok(GeneratedField::NamespaceNote),
                            "usernsCreate" | "userns_create" => Ok(GeneratedField::UsernsCreate),
                            "idmapMount" | "idmap_mount" => Ok(GeneratedField::IdmapMount),
                            "runtimeStateIdmap" | "runtime_state_idmap" => Ok(GeneratedField::RuntimeStateIdmap),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = UserNamespaces;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.UserNamespaces")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<UserNamespaces, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut sysctls__ = None;
                let mut initial_user_namespace__ = None;
                let mut namespace_note__ = None;
                let mut userns_create__ = None;
                let mut idmap_mount__ = None;
                let mut runtime_state_idmap__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Sysctls => {
                            if sysctls__.is_some() {
                                return Err(serde::de::Error::duplicate_field("sysctls"));
                            }
                            sysctls__ = Some(map_.next_value()?);
                        }
                        GeneratedField::InitialUserNamespace => {
                            if initial_user_namespace__.is_some() {
                                return Err(serde::de::Error::duplicate_field("initialUserNamespace"));
                            }
                            initial_user_namespace__ = Some(map_.next_value()?);
                        }
                        GeneratedField::NamespaceNote => {
                            if namespace_note__.is_some() {
                                return Err(serde::de::Error::duplicate_field("namespaceNote"));
                            }
                            namespace_note__ = Some(map_.next_value()?);
                        }
                        GeneratedField::UsernsCreate => {
                            if userns_create__.is_some() {
                                return Err(serde::de::Error::duplicate_field("usernsCreate"));
                            }
                            userns_create__ = map_.next_value()?;
                        }
                        GeneratedField::IdmapMount => {
                            if idmap_mount__.is_some() {
                                return Err(serde::de::Error::duplicate_field("idmapMount"));
                            }
                            idmap_mount__ = map_.next_value()?;
                        }
                        GeneratedField::RuntimeStateIdmap => {
                            if runtime_state_idmap__.is_some() {
                                return Err(serde::de::Error::duplicate_field("runtimeStateIdmap"));
                            }
                            runtime_state_idmap__ = map_.next_value()?;
                        }
                    }
                }
                Ok(UserNamespaces {
                    sysctls: sysctls__.unwrap_or_default(),
                    initial_user_namespace: initial_user_namespace__.unwrap_or_default(),
                    namespace_note: namespace_note__.unwrap_or_default(),
                    userns_create: userns_create__,
                    idmap_mount: idmap_mount__,
                    runtime_state_idmap: runtime_state_idmap__,
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.UserNamespaces", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for Verdict {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.Verdict", len)?;
        if true {
            struct_ser.serialize_field("converged", &self.converged)?;
        }
        if true {
            struct_ser.serialize_field("findings", &self.findings)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for Verdict {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "converged",
            "findings",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Converged,
            Findings,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "converged" => Ok(GeneratedField::Converged),
                            "findings" => Ok(GeneratedField::Findings),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = Verdict;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.Verdict")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<Verdict, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut converged__ = None;
                let mut findings__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Converged => {
                            if converged__.is_some() {
                                return Err(serde::de::Error::duplicate_field("converged"));
                            }
                            converged__ = Some(map_.next_value()?);
                        }
                        GeneratedField::Findings => {
                            if findings__.is_some() {
                                return Err(serde::de::Error::duplicate_field("findings"));
                            }
                            findings__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(Verdict {
                    converged: converged__.unwrap_or_default(),
                    findings: findings__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.Verdict", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for WatchRequest {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.WatchRequest", len)?;
        if let Some(v) = self.desired.as_ref() {
            struct_ser.serialize_field("desired", v)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for WatchRequest {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "desired",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Desired,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "desired" => Ok(GeneratedField::Desired),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = WatchRequest;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.WatchRequest")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<WatchRequest, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut desired__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Desired => {
                            if desired__.is_some() {
                                return Err(serde::de::Error::duplicate_field("desired"));
                            }
                            desired__ = map_.next_value()?;
                        }
                    }
                }
                Ok(WatchRequest {
                    desired: desired__,
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.WatchRequest", FIELDS, GeneratedVisitor)
    }
}
impl serde::Serialize for WatchResponse {
    #[allow(deprecated)]
    fn serialize<S>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        use serde::ser::SerializeStruct;
        let mut len = 0;
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        if true {
            len += 1;
        }
        let mut struct_ser = serializer.serialize_struct("sandbox_readiness.v1.WatchResponse", len)?;
        if let Some(v) = self.report.as_ref() {
            struct_ser.serialize_field("report", v)?;
        }
        if let Some(v) = self.verdict.as_ref() {
            struct_ser.serialize_field("verdict", v)?;
        }
        if true {
            struct_ser.serialize_field("heartbeat", &self.heartbeat)?;
        }
        struct_ser.end()
    }
}
impl<'de> serde::Deserialize<'de> for WatchResponse {
    #[allow(deprecated)]
    fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        const FIELDS: &[&str] = &[
            "report",
            "verdict",
            "heartbeat",
        ];

        #[allow(clippy::enum_variant_names)]
        enum GeneratedField {
            Report,
            Verdict,
            Heartbeat,
        }
        impl<'de> serde::Deserialize<'de> for GeneratedField {
            fn deserialize<D>(deserializer: D) -> std::result::Result<GeneratedField, D::Error>
            where
                D: serde::Deserializer<'de>,
            {
                struct GeneratedVisitor;

                impl serde::de::Visitor<'_> for GeneratedVisitor {
                    type Value = GeneratedField;

                    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(formatter, "expected one of: {:?}", &FIELDS)
                    }

                    #[allow(unused_variables)]
                    fn visit_str<E>(self, value: &str) -> std::result::Result<GeneratedField, E>
                    where
                        E: serde::de::Error,
                    {
                        match value {
                            "report" => Ok(GeneratedField::Report),
                            "verdict" => Ok(GeneratedField::Verdict),
                            "heartbeat" => Ok(GeneratedField::Heartbeat),
                            _ => Err(serde::de::Error::unknown_field(value, FIELDS)),
                        }
                    }
                }
                deserializer.deserialize_identifier(GeneratedVisitor)
            }
        }
        struct GeneratedVisitor;
        impl<'de> serde::de::Visitor<'de> for GeneratedVisitor {
            type Value = WatchResponse;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("struct sandbox_readiness.v1.WatchResponse")
            }

            fn visit_map<V>(self, mut map_: V) -> std::result::Result<WatchResponse, V::Error>
                where
                    V: serde::de::MapAccess<'de>,
            {
                let mut report__ = None;
                let mut verdict__ = None;
                let mut heartbeat__ = None;
                while let Some(k) = map_.next_key()? {
                    match k {
                        GeneratedField::Report => {
                            if report__.is_some() {
                                return Err(serde::de::Error::duplicate_field("report"));
                            }
                            report__ = map_.next_value()?;
                        }
                        GeneratedField::Verdict => {
                            if verdict__.is_some() {
                                return Err(serde::de::Error::duplicate_field("verdict"));
                            }
                            verdict__ = map_.next_value()?;
                        }
                        GeneratedField::Heartbeat => {
                            if heartbeat__.is_some() {
                                return Err(serde::de::Error::duplicate_field("heartbeat"));
                            }
                            heartbeat__ = Some(map_.next_value()?);
                        }
                    }
                }
                Ok(WatchResponse {
                    report: report__,
                    verdict: verdict__,
                    heartbeat: heartbeat__.unwrap_or_default(),
                })
            }
        }
        deserializer.deserialize_struct("sandbox_readiness.v1.WatchResponse", FIELDS, GeneratedVisitor)
    }
}
