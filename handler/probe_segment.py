"""The segment that proves NVDEC (`handler.video.probe`): 3 frames of H.264, 128x128, baseline.

An Annex-B elementary stream of FFmpeg's `testsrc`, kept as Python because the model archive
carries only `.py` files. Made with (`filter_units` drops x264's SEI, a kilobyte of settings):

    ffmpeg -f lavfi -i testsrc=size=128x128:rate=30 -frames:v 3 -c:v libx264 -profile:v baseline \
        -pix_fmt yuv420p -crf 40 -g 3 -bsf:v filter_units=remove_types=6 -f h264 probe.h264
"""

import base64

#: 827 bytes: an H.264 stream any NVDEC takes (its smallest H.264 picture is far below 128x128).
SEGMENT = base64.b64decode(
    "AAAAAWdCwAvZAgRsBEAAAAMAQAAADwPFCpIAAAABaMuA5LIAAAFliIQL8mKAAIU//h8sGAJlrqouAYCECzATgxzHAMFwJhXg"
    "zEcCR8gQgACAesBNfsYAaY/AjKfPFIO3H++I4f4ai1eMe+AoABAQAgqBHMO4ELOX/H8QAf/w1C/3ODvmBw0AA40KD0UsE5Cu"
    "H+MzwBwJJgIIQCUVYBuBra9ngigrfBrZPZ//PXPDda3vCgHyBAIAqD/gzmP4AxJ1g0d9NUYiCcUAAQXokAAQD0OAAIK3//tg"
    "hBRD4ezkV/h8gKy1wGIRIM4/0yoA4+QWMej2exWZglFY5j+GAf+wRV47pnFAY4x8zi/HcOqV/2CoEgFAEoVgAMBMd7+AiSx5"
    "YE9wp80n7BAR86Xa2OTfhLzdcxTBSHwACaZMu7udh0DsOgZ7zPeZ/TPeKdxH3wP1ca8P1ca/DSnwTZIW+EPwQAoOz6YKZntM"
    "9pn1h//2C4EwR+FRH2sqj8Im0ETMufefUwT/0p/sJAkd90PHY+mf/Gbn6YJZnvM95n9/qvh2CwE2QGjxYQlEYQkRwrl+Fcvp"
    "gnjmCJf/+DbuenwnphMQlFM+1vphOnplp6en/7e1rEhbfHV/eMnBoyASAOIQAX1VVFIoksDgxAi/VVUYojxEUQgPe61i1NxA"
    "Roxu7v4tQPIGgEQKIIV3d3d3FqIBYHxARvu7uKUT4kOIIC1q94tS8QI8fVVX9cf/w0R3ejSwdAKDCAHn3JrN/CdV/4K6qsDg"
    "SoEQeBoLPcu/QGYa0G03fGKFR8FTBBEAAQDFxzrdAdRMZEEK2GAGSywFCUULuyYIK2MQ/mvw3Cj7+W4AgAGAOE8J2W/YNrnn"
    "n0+/guOH+gYV/HfB8AAQH44BlCUsoSl4j3zyhcMKak+59//Cj4QIg1H8y++QMsd9wD1pSpYJCHbEAWH3p73/+NvqbPWscYQA"
    "EMQHgp6b+IQWEj4gSKq/4w//wVx73wKEwOAAjR+CWol/AAAAAUGaOBX4vPEayVhLwt4YkYEAKatR3o7yHe3icp3s70xHkO9H"
    "fYgSERNxG+g9fk2ojiJOAAAAAUGaVAT4Mc3xVAi682/XomA="
)
