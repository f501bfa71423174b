print("marquee")
