//! A list the page's template walks one item at a time: each item becomes the
//! template engine's value only when the loop reaches it, and is dropped after, so a
//! page of thousands of rows never holds every row twice (as its own struct and as
//! the engine's copy).

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use serde::Serialize;

/// `items`, as a sequence the template reads lazily.
pub fn one_at_a_time<T>(items: Vec<T>) -> Value
where
    T: Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    Value::from_object(OneAtATime(items))
}

#[derive(Debug)]
struct OneAtATime<T>(Vec<T>);

impl<T> Object for OneAtATime<T>
where
    T: Serialize + std::fmt::Debug + Send + Sync + 'static,
{
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let item = self.0.get(key.as_usize()?)?;
        Some(Value::from_serialize(item))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loops, lengths, truth and indexing read it as they read a list.
    #[test]
    fn the_template_reads_it_as_a_list() {
        let env = minijinja::Environment::new();
        let source = "{% if xs %}{{ xs|length }}:{% for x in xs %}{{ x.n }}{% if not loop.last %},{% endif %}{% endfor %};{{ xs[1].n }}{% endif %}{% if not empty %}!{% endif %}";
        #[derive(Debug, Serialize)]
        struct Item {
            n: u32,
        }
        let items = vec![Item { n: 1 }, Item { n: 2 }, Item { n: 3 }];
        let out = env
            .render_str(
                source,
                minijinja::context! {
                    xs => one_at_a_time(items),
                    empty => one_at_a_time(Vec::<Item>::new()),
                },
            )
            .unwrap();
        assert_eq!(out, "3:1,2,3;2!");
    }
}
