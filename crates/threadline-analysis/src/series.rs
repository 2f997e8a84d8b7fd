//! What a rollup series is: a level (requests or model calls) and the values of the
//! dimensions it is split by (`SeriesKey`), the minute buckets of span time, and
//! series filters. The vocabulary shared by observing spans, rolling them up and
//! reading the cells back.

/// One rollup bucket: a minute of span start time.
pub const BUCKET_NS: i64 = 60_000_000_000;

/// The minute a span time falls in, as unix minutes.
pub fn minute_of(unix_nano: i64) -> i64 {
    unix_nano.div_euclid(BUCKET_NS)
}

/// What a series is split by. Names are the API's `group_by=` / filter names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    Service,
    Route,
    Model,
    Adapter,
    Instance,
    Image,
    PromptVersion,
    AbGroup,
    GrayTag,
    Provider,
    /// The service of the nearest ancestor span (in the export request) that belongs
    /// to another service: who called.
    UpstreamService,
}

impl Dimension {
    pub const ALL: [Dimension; 11] = [
        Dimension::Service,
        Dimension::Route,
        Dimension::Model,
        Dimension::Adapter,
        Dimension::Instance,
        Dimension::Image,
        Dimension::PromptVersion,
        Dimension::AbGroup,
        Dimension::GrayTag,
        Dimension::Provider,
        Dimension::UpstreamService,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Service => "service",
            Dimension::Route => "route",
            Dimension::Model => "model",
            Dimension::Adapter => "adapter",
            Dimension::Instance => "instance",
            Dimension::Image => "image",
            Dimension::PromptVersion => "prompt_version",
            Dimension::AbGroup => "ab_group",
            Dimension::GrayTag => "gray_tag",
            Dimension::Provider => "provider",
            Dimension::UpstreamService => "upstream_service",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a series counts (see `observe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Requests as their callers see them: a route's entry span, whole.
    Request,
    /// Model calls, on their own duration.
    #[default]
    Call,
}

impl Level {
    pub const ALL: [Level; 2] = [Level::Request, Level::Call];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Request => "request",
            Level::Call => "call",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The level a query or watch reads when it does not say: requests when it is
    /// scoped by route (what a route's callers experience), model calls otherwise
    /// (model, adapter, instance … series measure the call).
    pub fn implied_by(dims: impl IntoIterator<Item = Dimension>) -> Self {
        if dims.into_iter().any(|d| d == Dimension::Route) {
            Level::Request
        } else {
            Level::Call
        }
    }
}

/// The level and dimension values of one series; `""` where observations carried none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    level: Level,
    dims: [String; 11],
}

impl SeriesKey {
    /// A blank key at `level`.
    pub fn at(level: Level) -> Self {
        Self {
            level,
            dims: Default::default(),
        }
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn get(&self, dim: Dimension) -> &str {
        &self.dims[dim.index()]
    }

    pub fn with(mut self, dim: Dimension, value: impl Into<String>) -> Self {
        self.dims[dim.index()] = value.into();
        self
    }

    /// The key reduced to `dims` (others blank, the level kept): what a `group_by`
    /// merges under.
    pub fn project(&self, dims: &[Dimension]) -> SeriesKey {
        let mut out = SeriesKey::at(self.level);
        for &d in dims {
            out.dims[d.index()] = self.dims[d.index()].clone();
        }
        out
    }

    /// The key with `subject` replaced by `with` in every dimension value (an erased
    /// id inside a route like `/v1/users/ID/chat`); `None` when no value holds it.
    pub fn redacted(&self, subject: &str, with: &str) -> Option<SeriesKey> {
        if subject.is_empty() || !self.dims.iter().any(|v| v.contains(subject)) {
            return None;
        }
        let mut out = self.clone();
        for v in &mut out.dims {
            *v = v.replace(subject, with);
        }
        Some(out)
    }

    /// A canonical text form, for storage: model-call keys a JSON array of the
    /// dimension values (as every key was before levels), request keys an object
    /// `{"level": "request", "dims": [...]}`.
    pub fn to_text(&self) -> String {
        match self.level {
            Level::Call => serde_json::to_string(&self.dims).unwrap_or_default(),
            Level::Request => {
                serde_json::json!({"level": self.level.as_str(), "dims": self.dims}).to_string()
            }
        }
    }

    /// Keys stored before a dimension was added have fewer values: the rest are blank.
    pub fn from_text(text: &str) -> Option<Self> {
        let (level, values): (Level, Vec<String>) = if text.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(text).ok()?;
            (
                Level::parse(v.get("level")?.as_str()?)?,
                serde_json::from_value(v.get("dims")?.clone()).ok()?,
            )
        } else {
            (Level::Call, serde_json::from_str(text).ok()?)
        };
        let mut key = SeriesKey::at(level);
        if values.len() > key.dims.len() {
            return None;
        }
        for (slot, v) in key.dims.iter_mut().zip(values) {
            *slot = v;
        }
        Some(key)
    }
}

/// A series as one export request's spans spell it: the level and the dimension
/// values borrowed from the spans (`Observed::series`). What a batch groups its
/// observations by before any key is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeriesRef<'a> {
    level: Level,
    dims: [&'a str; 11],
}

impl<'a> SeriesRef<'a> {
    pub(crate) fn new(level: Level, dims: [&'a str; 11]) -> Self {
        Self { level, dims }
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn get(&self, dim: Dimension) -> &'a str {
        self.dims[dim.index()]
    }

    /// The owned key.
    pub fn to_key(&self) -> SeriesKey {
        SeriesKey {
            level: self.level,
            dims: self.dims.map(str::to_owned),
        }
    }
}

/// A series filter: every listed dimension must have the given value.
pub fn matches(key: &SeriesKey, filter: &[(Dimension, String)]) -> bool {
    filter.iter().all(|(d, v)| key.get(*d) == v)
}

/// A series filter at a level.
pub fn matches_at(key: &SeriesKey, level: Level, filter: &[(Dimension, String)]) -> bool {
    key.level() == level && matches(key, filter)
}
