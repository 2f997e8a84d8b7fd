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
/// The values are kept in one string (a key is one allocation, not eleven: ingest
/// makes one per series of each export request, and the writer hashes and compares
/// them); ordered as the level, then the values in `Dimension::ALL` order.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    level: Level,
    /// The dimension values one after the other, in `Dimension::ALL` order.
    joined: String,
    /// Where each value ends in `joined`.
    ends: [u32; 11],
}

impl SeriesKey {
    /// A blank key at `level`.
    pub fn at(level: Level) -> Self {
        Self {
            level,
            joined: String::new(),
            ends: [0; 11],
        }
    }

    /// The key of `level` with these values (in `Dimension::ALL` order).
    fn of_values<S: AsRef<str>>(level: Level, values: &[S; 11]) -> Self {
        let mut joined = String::with_capacity(values.iter().map(|v| v.as_ref().len()).sum());
        let mut ends = [0u32; 11];
        for (end, value) in ends.iter_mut().zip(values) {
            joined.push_str(value.as_ref());
            // Values come from spans whose requests are bounded far below 4 GiB.
            *end = u32::try_from(joined.len()).unwrap_or(u32::MAX);
        }
        Self {
            level,
            joined,
            ends,
        }
    }

    /// The dimension values, in `Dimension::ALL` order.
    pub fn values(&self) -> [&str; 11] {
        let mut start = 0usize;
        self.ends.map(|end| {
            let value = self.joined.get(start..end as usize).unwrap_or_default();
            start = end as usize;
            value
        })
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn get(&self, dim: Dimension) -> &str {
        let i = dim.index();
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.joined
            .get(start..self.ends[i] as usize)
            .unwrap_or_default()
    }

    pub fn with(self, dim: Dimension, value: impl Into<String>) -> Self {
        let value = value.into();
        let mut values = self.values();
        values[dim.index()] = &value;
        Self::of_values(self.level, &values)
    }

    /// The key reduced to `dims` (others blank, the level kept): what a `group_by`
    /// merges under.
    pub fn project(&self, dims: &[Dimension]) -> SeriesKey {
        let all = self.values();
        let mut kept = [""; 11];
        for &d in dims {
            kept[d.index()] = all[d.index()];
        }
        Self::of_values(self.level, &kept)
    }

    /// The key with `subject` replaced by `with` in every dimension value (an erased
    /// id inside a route like `/v1/users/ID/chat`); `None` when no value holds it.
    pub fn redacted(&self, subject: &str, with: &str) -> Option<SeriesKey> {
        let values = self.values();
        if subject.is_empty() || !values.iter().any(|v| v.contains(subject)) {
            return None;
        }
        Some(Self::of_values(
            self.level,
            &values.map(|v| v.replace(subject, with)),
        ))
    }

    /// A canonical text form, for storage: model-call keys a JSON array of the
    /// dimension values (as every key was before levels), request keys an object
    /// `{"level": "request", "dims": [...]}`.
    pub fn to_text(&self) -> String {
        match self.level {
            Level::Call => serde_json::to_string(&self.values()).unwrap_or_default(),
            Level::Request => {
                serde_json::json!({"level": self.level.as_str(), "dims": self.values()}).to_string()
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
        let mut all: [&str; 11] = [""; 11];
        if values.len() > all.len() {
            return None;
        }
        for (slot, v) in all.iter_mut().zip(&values) {
            *slot = v;
        }
        Some(Self::of_values(level, &all))
    }
}

impl Ord for SeriesKey {
    /// The level, then the values one by one in `Dimension::ALL` order.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.level
            .cmp(&other.level)
            .then_with(|| self.values().cmp(&other.values()))
    }
}

impl PartialOrd for SeriesKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for SeriesKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesKey")
            .field("level", &self.level)
            .field("dims", &self.values())
            .finish()
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
        SeriesKey::of_values(self.level, &self.dims)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(level: Level, values: [&str; 11]) -> SeriesKey {
        Dimension::ALL
            .into_iter()
            .zip(values)
            .fold(SeriesKey::at(level), |k, (d, v)| k.with(d, v))
    }

    /// One string holds every value: a key still orders, compares and reads as the
    /// level and eleven separate values would.
    #[test]
    fn a_key_behaves_as_its_level_and_values() {
        let mut a = [""; 11];
        a[0] = "ab";
        a[1] = "a";
        let mut b = [""; 11];
        b[0] = "a";
        b[1] = "zz";
        let (ka, kb) = (key(Level::Call, a), key(Level::Call, b));
        // By value, not by the joined text ("aba" < "azz").
        assert!(ka > kb);
        assert!(key(Level::Request, b) < ka);
        assert_eq!(ka.values(), a);
        assert_eq!(ka.get(Dimension::Route), "a");
        assert_eq!(ka.clone().with(Dimension::Route, "a"), ka);
        // Same joined text, other values: other keys.
        let mut c = [""; 11];
        c[0] = "a";
        c[1] = "ba";
        assert_ne!(key(Level::Call, c), ka);
        let projected = ka.project(&[Dimension::Route]);
        assert_eq!(projected.get(Dimension::Service), "");
        assert_eq!(projected.get(Dimension::Route), "a");
        assert_eq!(SeriesKey::from_text(&ka.to_text()), Some(ka.clone()));
        let r = key(Level::Request, b);
        assert_eq!(SeriesKey::from_text(&r.to_text()), Some(r));
        // Redaction is per value: a subject found only across two values is not there.
        assert_eq!(ka.redacted("ba", "x"), None);
        assert_eq!(
            ka.redacted("b", "x").map(|k| k.values()[0].to_owned()),
            Some("ax".to_owned())
        );
        let observed = SeriesRef::new(Level::Call, a).to_key();
        assert_eq!(observed, ka);
    }
}
