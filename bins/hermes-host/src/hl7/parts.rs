//! The parts of a message, borrowed from its text and found when asked for:
//! a segment's fields ([`SegmentRef`]), a field's repetitions
//! ([`FieldRef`]), a repetition's components ([`RepeatRef`]), a
//! component's subcomponents ([`ComponentRef`]). Nothing is stored but the
//! text.

use super::delimiters::Delimiters;

/// One segment of a message, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct SegmentRef<'a> {
    text: &'a str,
    d: Delimiters,
}

impl<'a> SegmentRef<'a> {
    /// Segment `text` (without its `\r`) of a message with delimiters `d`.
    pub(super) fn new(text: &'a str, d: Delimiters) -> SegmentRef<'a> {
        SegmentRef { text, d }
    }

    pub fn name(&self) -> &'a str {
        &self.text[..3]
    }

    pub fn is_header(&self) -> bool {
        self.name() == "MSH"
    }

    /// The segment as HL7 text.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// Its fields from field 1. In MSH, field 1 is the field separator and
    /// field 2 the encoding characters, each one plain value. A segment
    /// written `NTE|` has one empty field.
    pub fn fields(self) -> impl Iterator<Item = FieldRef<'a>> + 'a {
        let d = self.d;
        let (header, body) = match self.is_header() {
            // `MSH|^~\&` (8 bytes, the delimiters are ASCII), then `|` and the rest.
            true => {
                let plain = |text| FieldRef { text, d, plain: true };
                (Some([plain(&self.text[3..4]), plain(&self.text[4..8])]), self.text.get(9..))
            }
            false => (None, Some(&self.text[4..])),
        };
        header.into_iter().flatten().chain(
            body.into_iter().flat_map(move |body| body.split(d.field)).map(move |text| FieldRef {
                text,
                d,
                plain: false,
            }),
        )
    }

    /// Field `n` (1-based), if the segment has it.
    pub fn field(self, n: usize) -> Option<FieldRef<'a>> {
        self.fields().nth(n.checked_sub(1)?)
    }
}

/// A field: its repetitions, each of components, each of subcomponents
/// (raw HL7 text). MSH.1 and MSH.2 are plain: one value, not split.
#[derive(Clone, Copy, Debug)]
pub struct FieldRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// One repetition of a field.
#[derive(Clone, Copy, Debug)]
pub struct RepeatRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// One component of a repetition.
#[derive(Clone, Copy, Debug)]
pub struct ComponentRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// The parts of `text` between `sep`, or `text` whole when it is plain.
fn parts(text: &str, sep: char, plain: bool) -> impl Iterator<Item = &str> {
    text.split(move |c: char| !plain && c == sep)
}

impl<'a> FieldRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn repeats(self) -> impl Iterator<Item = RepeatRef<'a>> + 'a {
        let FieldRef { text, d, plain } = self;
        parts(text, d.repetition, plain).map(move |text| RepeatRef { text, d, plain })
    }

    /// The text of a field that is one plain value (MSH.1 and MSH.2 are).
    pub fn as_leaf(&self) -> Option<&'a str> {
        let d = self.d;
        (self.plain || !self.text.contains([d.repetition, d.component, d.subcomponent])).then_some(self.text)
    }

    /// Every leaf empty.
    pub fn is_empty(&self) -> bool {
        let d = self.d;
        match self.plain {
            true => self.text.is_empty(),
            false => self.text.chars().all(|c| c == d.repetition || c == d.component || c == d.subcomponent),
        }
    }
}

impl<'a> RepeatRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn components(self) -> impl Iterator<Item = ComponentRef<'a>> + 'a {
        let RepeatRef { text, d, plain } = self;
        parts(text, d.component, plain).map(move |text| ComponentRef { text, d, plain })
    }

    /// One component with one subcomponent: the repetition's text is the value.
    pub fn is_leaf(&self) -> bool {
        self.plain || !self.text.contains([self.d.component, self.d.subcomponent])
    }
}

impl<'a> ComponentRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn subcomponents(self) -> impl Iterator<Item = &'a str> + 'a {
        let ComponentRef { text, d, plain } = self;
        parts(text, d.subcomponent, plain)
    }

    /// One subcomponent: the component's text is the value.
    pub fn is_leaf(&self) -> bool {
        self.plain || !self.text.contains(self.d.subcomponent)
    }
}

#[cfg(test)]
mod tests {
    use crate::hl7::message::Hl7Message;
    use crate::hl7::samples::{ADT_A01, ORU_R01, parts};

    #[test]
    fn the_model_has_repetitions_components_and_subcomponents() {
        let message = Hl7Message::parse(ADT_A01).unwrap();
        let pid = parts(message.segment(message.find("PID", 1).unwrap()).unwrap());
        assert_eq!(pid[2].len(), 2, "PID.3 repeats");
        assert_eq!(pid[2][1][3], ["USSSA"]);
        let msh = message.segment(0).unwrap();
        assert_eq!(msh.field(1).unwrap().as_leaf(), Some("|"));
        assert_eq!(msh.field(2).unwrap().as_leaf(), Some("^~\\&"));
        assert_eq!(parts(msh)[8][0][1], ["A01"]);
        let oru = Hl7Message::parse(ORU_R01).unwrap();
        let obr = parts(oru.segment(oru.find("OBR", 1).unwrap()).unwrap());
        assert_eq!(obr[15][0][0], ["555-55-5555", "PRIMARY", "PATRICIA P"]);
        assert_eq!(oru.find("OBX", 2), Some(4));
        assert_eq!(oru.find("OBX", 3), None);
    }
}
