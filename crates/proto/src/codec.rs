//! The prost codec, with one change: a request that fails to decode (for example a `string` field
//! holding invalid UTF-8) is the client's mistake, so it is answered with `INVALID_ARGUMENT`
//! naming the field prost reports, not tonic's default `INTERNAL`.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstDecoder, ProstEncoder};

#[derive(Debug, Clone)]
pub struct ValidatingCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for ValidatingCodec<T, U> {
    fn default() -> Self {
        ValidatingCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for ValidatingCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ValidatingDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ValidatingDecoder(ProstDecoder::new(BufferSettings::default()))
    }
}

#[derive(Debug, Clone)]
pub struct ValidatingDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for ValidatingDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if s.code() == tonic::Code::Internal {
                Status::invalid_argument(format!("malformed request: {}", s.message()))
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
