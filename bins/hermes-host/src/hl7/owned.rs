//! One segment as an owned tree of parts: what a `json`, `yaml` or `toml`
//! tree is read into, one segment at a time, before it is written out as
//! HL7 text. (The message itself is never held this way: see the module
//! above.) Also the shape hl7-parser's tree is compared in, in `fuzzing`.

use super::delimiters::Delimiters;

/// A field: its repetitions, each a list of components, each a list of
/// subcomponents (raw HL7 text). An empty field is one empty leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    pub repeats: Vec<Repeat>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Repeat {
    pub components: Vec<Component>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Component {
    pub subcomponents: Vec<String>,
}

impl Component {
    pub fn leaf(text: impl Into<String>) -> Component {
        Component { subcomponents: vec![text.into()] }
    }

    pub fn is_empty(&self) -> bool {
        self.subcomponents.iter().all(String::is_empty)
    }
}

impl Repeat {
    pub fn leaf(text: impl Into<String>) -> Repeat {
        Repeat { components: vec![Component::leaf(text)] }
    }

    pub fn is_empty(&self) -> bool {
        self.components.iter().all(Component::is_empty)
    }
}

impl Field {
    pub fn leaf(text: impl Into<String>) -> Field {
        Field { repeats: vec![Repeat::leaf(text)] }
    }

    pub fn empty() -> Field {
        Field::leaf("")
    }

    pub fn is_empty(&self) -> bool {
        self.repeats.iter().all(Repeat::is_empty)
    }

    /// The text of a field that is one plain value (MSH.1 and MSH.2 are).
    pub fn as_leaf(&self) -> Option<&str> {
        match self.repeats.as_slice() {
            [Repeat { components }] => match components.as_slice() {
                [Component { subcomponents }] => match subcomponents.as_slice() {
                    [text] => Some(text),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }

    /// Drops trailing empty repetitions, components and subcomponents.
    pub fn trim(&mut self) {
        for repeat in &mut self.repeats {
            for component in &mut repeat.components {
                while component.subcomponents.len() > 1 && component.subcomponents.last().is_some_and(String::is_empty)
                {
                    component.subcomponents.pop();
                }
            }
            while repeat.components.len() > 1 && repeat.components.last().is_some_and(Component::is_empty) {
                repeat.components.pop();
            }
        }
        while self.repeats.len() > 1 && self.repeats.last().is_some_and(Repeat::is_empty) {
            self.repeats.pop();
        }
    }

    fn print(&self, d: &Delimiters, out: &mut String) {
        for (r, repeat) in self.repeats.iter().enumerate() {
            if r > 0 {
                out.push(d.repetition);
            }
            for (c, component) in repeat.components.iter().enumerate() {
                if c > 0 {
                    out.push(d.component);
                }
                for (s, sub) in component.subcomponents.iter().enumerate() {
                    if s > 0 {
                        out.push(d.subcomponent);
                    }
                    out.push_str(sub);
                }
            }
        }
    }
}

/// One segment. `fields[0]` is field 1; in MSH that is the field separator
/// and `fields[1]` the encoding characters, each one plain value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub name: String,
    pub fields: Vec<Field>,
}

impl Segment {
    pub fn new(name: &str) -> Segment {
        Segment { name: name.to_owned(), fields: Vec::new() }
    }

    pub fn is_header(&self) -> bool {
        self.name == "MSH"
    }

    /// Drops trailing empty fields (MSH.1 and MSH.2 stay).
    pub fn trim(&mut self) {
        let keep = if self.is_header() { 2 } else { 0 };
        while self.fields.len() > keep && self.fields.last().is_some_and(Field::is_empty) {
            self.fields.pop();
        }
    }

    /// Writes the segment as HL7 text.
    pub fn print(&self, d: &Delimiters, out: &mut String) {
        out.push_str(&self.name);
        let mut fields = self.fields.iter();
        if self.is_header() {
            // MSH|^~\&|...: MSH.1 is the separator itself, MSH.2 follows it directly.
            out.push(d.field);
            fields.next();
            if let Some(encoding) = fields.next() {
                encoding.print(d, out);
            }
        }
        for field in fields {
            out.push(d.field);
            field.print(d, out);
        }
        if self.fields.is_empty() && !self.is_header() {
            // A segment name alone (`NTE`) is not a segment to the parser:
            // an empty one is written `NTE|`.
            out.push(d.field);
        }
    }
}

/// Makes `items` at least `len` long.
pub(crate) fn grow<T>(items: &mut Vec<T>, len: usize, empty: impl Fn() -> T) {
    while items.len() < len {
        items.push(empty());
    }
}
