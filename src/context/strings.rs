//! Module strings: reading one's bytes, strings made for one call and released with it, and
//! strings made once for a fixed set of words.

use redis_module::{Context, raw};

/// The bytes of a module string.
///
/// # Safety
/// `arg` must be a valid module string that outlives the returned slice.
pub unsafe fn string_bytes<'a>(arg: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    let ptr = unsafe { raw::RedisModule_StringPtrLen.expect("StringPtrLen")(arg, &mut len) };
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// Module strings for one call (replication arguments, stream fields), in order, each released
/// when dropped; up to 16 allocate nothing on the Rust side.
pub struct TempStrings {
    ctx: *mut raw::RedisModuleCtx,
    inline: [*mut raw::RedisModuleString; 16],
    len: usize,
    /// All of them, once there are more than `inline` holds.
    spilled: Vec<*mut raw::RedisModuleString>,
}

impl TempStrings {
    pub fn new(ctx: &Context) -> TempStrings {
        TempStrings {
            ctx: ctx.ctx,
            inline: [std::ptr::null_mut(); 16],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// Takes ownership of `string`, returning it.
    pub fn keep(&mut self, string: *mut raw::RedisModuleString) -> *mut raw::RedisModuleString {
        if self.spilled.is_empty() && self.len < self.inline.len() {
            self.inline[self.len] = string;
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.push(string);
        }
        string
    }

    /// Another reference to a string someone else owns (e.g. the command's key).
    ///
    /// # Safety
    /// `string` must be a valid module string.
    pub unsafe fn retain(
        &mut self,
        string: *mut raw::RedisModuleString,
    ) -> *mut raw::RedisModuleString {
        unsafe { raw::RedisModule_RetainString.expect("RetainString")(self.ctx, string) };
        self.keep(string)
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> *mut raw::RedisModuleString {
        self.keep(unsafe {
            raw::RedisModule_CreateString.expect("CreateString")(
                self.ctx,
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        })
    }

    pub fn integer(&mut self, n: u64) -> *mut raw::RedisModuleString {
        self.keep(unsafe {
            raw::RedisModule_CreateStringFromLongLong.expect("CreateStringFromLongLong")(
                self.ctx,
                n as std::os::raw::c_longlong,
            )
        })
    }

    /// Every string kept, in order.
    pub fn all(&self) -> &[*mut raw::RedisModuleString] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

impl Drop for TempStrings {
    fn drop(&mut self) {
        for string in self.all() {
            unsafe { raw::RedisModule_FreeString.expect("FreeString")(self.ctx, *string) };
        }
    }
}

/// Module strings for a fixed set of words, made once (on first use, on the main thread) and
/// shared by every call: entries and replicated commands reference them instead of copying.
pub struct StaticStrings<const N: usize> {
    words: [&'static str; N],
    created: std::sync::OnceLock<Created<N>>,
}

struct Created<const N: usize>([*mut raw::RedisModuleString; N]);

// Created once and never changed or freed: only the pointers are shared.
unsafe impl<const N: usize> Send for Created<N> {}
unsafe impl<const N: usize> Sync for Created<N> {}

impl<const N: usize> StaticStrings<N> {
    pub const fn new(words: [&'static str; N]) -> StaticStrings<N> {
        StaticStrings {
            words,
            created: std::sync::OnceLock::new(),
        }
    }

    fn created(&self) -> &[*mut raw::RedisModuleString; N] {
        &self
            .created
            .get_or_init(|| {
                Created(self.words.map(|word| unsafe {
                    // No context: a string that lives as long as the module.
                    raw::RedisModule_CreateString.expect("CreateString")(
                        std::ptr::null_mut(),
                        word.as_ptr().cast(),
                        word.len(),
                    )
                }))
            })
            .0
    }

    /// Word number `index` as text.
    pub fn word(&self, index: usize) -> &'static str {
        self.words[index]
    }

    /// The string of word number `index`, borrowed.
    pub fn get(&self, index: usize) -> *mut raw::RedisModuleString {
        self.created()[index]
    }

    /// The string of `word`, borrowed, if it is one of these.
    pub fn find(&self, word: &[u8]) -> Option<*mut raw::RedisModuleString> {
        let at = self.words.iter().position(|w| w.as_bytes() == word)?;
        Some(self.get(at))
    }
}
