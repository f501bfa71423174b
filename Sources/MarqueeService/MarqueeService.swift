// MarqueeService
