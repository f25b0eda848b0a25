//! The message as a tree, serialised straight from its text: a [`Node`]
//! borrows the text and knows what it is (a value, an array, an object)
//! from it, so a tree of any size costs its output and no more. Serde
//! writes it as JSON, and the toml crate as TOML (`toml_in_one_piece`).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::hl7::message::Hl7Message;
use crate::hl7::parts::{ComponentRef, FieldRef, RepeatRef, SegmentRef};

/// A node of the tree, borrowing the message's text: what it is (a value,
/// an array, an object) is read from the text as it is written.
#[derive(Clone, Copy)]
pub(super) enum Node<'a> {
    Text(&'a str),
    /// A field of several repetitions: an array, an empty one kept as `""`.
    Repeats(FieldRef<'a>),
    /// A repetition's components by number, empty ones left out.
    Components(RepeatRef<'a>),
    /// A component's subcomponents by number, empty ones left out.
    Subcomponents(ComponentRef<'a>),
    /// A segment's fields by number, empty ones left out.
    Fields(SegmentRef<'a>),
}

impl<'a> Node<'a> {
    fn field(field: FieldRef<'a>) -> Node<'a> {
        match field.repeats().nth(1) {
            Some(_) => Node::Repeats(field),
            None => Node::repeat(field.repeats().next().expect("a field has a repetition")),
        }
    }

    /// A plain value; a lone component with subcomponents stays an object
    /// of components (see the module doc).
    fn repeat(repeat: RepeatRef<'a>) -> Node<'a> {
        match repeat.is_leaf() {
            true => Node::Text(repeat.as_str()),
            false => Node::Components(repeat),
        }
    }

    fn component(component: ComponentRef<'a>) -> Node<'a> {
        match component.is_leaf() {
            true => Node::Text(component.as_str()),
            false => Node::Subcomponents(component),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Node::Text(text) => text.is_empty(),
            // Two repetitions or more, even empty ones.
            Node::Repeats(_) => false,
            _ => self.entries().next().is_none(),
        }
    }

    /// The items of an array.
    pub(super) fn items(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let field = match self {
            Node::Repeats(field) => Some(*field),
            _ => None,
        };
        field.into_iter().flat_map(|field| field.repeats()).map(|repeat| match Node::repeat(repeat) {
            // An empty repetition keeps its place in the array.
            node if node.is_empty() => Node::Text(""),
            node => node,
        })
    }

    /// The non-empty entries of an object, with their 1-based numbers.
    pub(super) fn entries(&self) -> Box<dyn Iterator<Item = (usize, Node<'a>)> + 'a> {
        let numbered = |nodes: Box<dyn Iterator<Item = Node<'a>> + 'a>| {
            Box::new(nodes.enumerate().map(|(i, node)| (i + 1, node)).filter(|(_, node)| !node.is_empty()))
        };
        match *self {
            Node::Text(_) | Node::Repeats(_) => Box::new(std::iter::empty()),
            Node::Components(repeat) => numbered(Box::new(repeat.components().map(Node::component))),
            Node::Subcomponents(component) => numbered(Box::new(component.subcomponents().map(Node::Text))),
            Node::Fields(segment) => {
                let header = segment.is_header();
                numbered(Box::new(segment.fields().enumerate().map(move |(i, field)| match header && i < 2 {
                    true => Node::Text(field.as_leaf().unwrap_or_default()),
                    false => Node::field(field),
                })))
            }
        }
    }
}

pub(super) struct TreeOut<'a>(pub(super) &'a Hl7Message);

impl Serialize for TreeOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("segments", &SegmentsOut(self.0))?;
        map.end()
    }
}

struct SegmentsOut<'a>(&'a Hl7Message);

impl Serialize for SegmentsOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.segment_count()))?;
        for segment in self.0.segments() {
            seq.serialize_element(&SegmentOut(segment))?;
        }
        seq.end()
    }
}

struct SegmentOut<'a>(SegmentRef<'a>);

impl Serialize for SegmentOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("segment", self.0.name())?;
        map.serialize_entry("fields", &Node::Fields(self.0))?;
        map.end()
    }
}

/// Objects have 1-based numeric keys, written as strings, in numeric order
/// ("2" before "10"); arrays are repetitions.
impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Text(text) => s.serialize_str(text),
            Node::Repeats(_) => {
                let mut seq = s.serialize_seq(Some(self.items().count()))?;
                for item in self.items() {
                    seq.serialize_element(&item)?;
                }
                seq.end()
            }
            _ => {
                let mut map = s.serialize_map(Some(self.entries().count()))?;
                for (index, node) in self.entries() {
                    map.serialize_entry(&index.to_string(), &node)?;
                }
                map.end()
            }
        }
    }
}
